"""Every Arrow type a user can send either round-trips (write, column statistics, in-process
and Spark reads) or is refused before anything is written (issue 11). Property-based over a
zoo of types and values."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError

_TS = st.datetimes(dt.datetime(1700, 1, 1), dt.datetime(2200, 1, 1))
_UTC_TS = _TS.map(lambda d: d.replace(tzinfo=dt.UTC))
ZOO: dict[str, tuple[pa.DataType, st.SearchStrategy]] = {
    "bool": (pa.bool_(), st.booleans()),
    "int8": (pa.int8(), st.integers(-(2**7), 2**7 - 1)),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "uint32": (pa.uint32(), st.integers(0, 2**32 - 1)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=True)),
    "float64": (pa.float64(), st.floats(allow_nan=True)),
    "float16": (pa.float16(), st.just(None)),
    "string": (pa.string(), st.text()),
    "large_string": (pa.large_string(), st.text(max_size=5)),
    "binary": (pa.binary(), st.binary(max_size=8)),
    "date32": (pa.date32(), st.dates()),
    "ts_ms": (
        pa.timestamp("ms"),
        _TS.map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    ),
    "ts_us": (pa.timestamp("us"), _TS),
    "ts_ns": (pa.timestamp("ns"), st.datetimes(dt.datetime(1700, 1, 1), dt.datetime(2200, 1, 1))),
    "ts_utc": (pa.timestamp("us", tz="UTC"), _UTC_TS),
    "decimal": (
        pa.decimal128(12, 3),
        st.decimals(-(10**8), 10**8, places=3, allow_nan=False, allow_infinity=False),
    ),
    "decimal256_wide": (pa.decimal256(40, 0), st.integers(-(10**30), 10**30).map(decimal.Decimal)),
    "list_int": (pa.list_(pa.int64()), st.lists(st.integers(-5, 5), max_size=3)),
    "time64": (pa.time64("us"), st.times()),
    "duration": (pa.duration("us"), st.timedeltas(dt.timedelta(-9), dt.timedelta(9))),
    "struct": (pa.struct([("a", pa.int64())]), st.fixed_dictionaries({"a": st.integers(0, 9)})),
    "dictionary": (pa.dictionary(pa.int8(), pa.string()), st.sampled_from(["x", "y", "é"])),
}


SAMPLES: dict[str, list] = {
    "bool": [True, False],
    "int8": [-128, 127],
    "int32": [-(2**31), 7],
    "int64": [2**63 - 1, -(2**63)],
    "uint32": [0, 2**32 - 1],
    "float32": [1.5, float("nan"), float("-inf")],
    "float64": [0.1, float("nan"), float("inf")],
    "float16": [None],
    "string": ["it's", "é\\u00e9", ""],
    "large_string": ["a", "b"],
    "binary": [b"\x00\xff", b""],
    "date32": [dt.date(1, 1, 1), dt.date(2024, 2, 29)],
    "ts_ms": [dt.datetime(1900, 1, 1), dt.datetime(2024, 1, 1, 1, 1, 1, 1000)],
    "ts_us": [dt.datetime(1700, 1, 1), dt.datetime(2024, 1, 1, 1, 1, 1, 1)],
    "ts_ns": [dt.datetime(2024, 1, 1, 1, 1, 1, 1), dt.datetime(1970, 1, 1)],
    "ts_utc": [dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(1999, 1, 1, tzinfo=dt.UTC)],
    "decimal": [decimal.Decimal("1.500"), decimal.Decimal("-99999.999")],
    "decimal256_wide": [decimal.Decimal(10**30)],
    "list_int": [[1, 2], []],
    "time64": [dt.time(1, 2)],
    "duration": [dt.timedelta(1)],
    "struct": [{"a": 1}],
    "dictionary": ["x", "é"],
}


def _values(name: str) -> st.SearchStrategy:
    return st.lists(st.one_of(st.none(), ZOO[name][1]), min_size=1, max_size=6)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _expected(kind: pa.DataType, values: list) -> list:
    """What a read gives back: the values as Arrow holds them in the input type."""
    return pa.array(values, kind).to_pylist()


def _nothing_written(path: Path) -> bool:
    return not any(p for p in path.rglob("*.parquet") if ".braid" not in p.parts)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_every_type_round_trips_or_is_refused_before_writing(tmp_path_factory, data) -> None:
    name = data.draw(st.sampled_from(sorted(ZOO)))
    values = data.draw(_values(name))
    kind = ZOO[name][0]
    path = tmp_path_factory.mktemp(name)
    c = WriteClient.create(str(path / "t"), record_key="id", precombine="ts")
    ids = [f"k{i}" for i in range(len(values))]
    incoming = pa.table({"id": ids, "ts": [1] * len(ids), "v": pa.array(values, kind)})
    try:
        c.upsert(incoming)
    except InputError as exc:
        assert "'v'" in str(exc), exc
        assert c.timeline() == [] and _nothing_written(path / "t")
        return
    got = c.read_arrow().sort_by("id")
    expected = _expected(kind, values)
    assert all(_same(a, b) for a, b in zip(got.column("v").to_pylist(), expected, strict=True))
    comparable = [
        v for v in expected if v is not None and not (isinstance(v, float) and math.isnan(v))
    ]
    for stat in c.column_stats("v"):
        assert stat.null_count == sum(v is None for v in expected)
        if stat.min_value is not None and comparable and not isinstance(comparable[0], list):
            assert stat.min_value <= min(comparable) and max(comparable) <= stat.max_value
    assert c.validate() == []


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_every_stored_type_reads_back_through_spark(tmp_path, spark) -> None:
    stored = 0
    for name, (kind, _) in sorted(ZOO.items()):
        values = [*SAMPLES[name], None]
        c = WriteClient.create(str(tmp_path / name), record_key="id", precombine="ts", spark=spark)
        ids = [f"k{i}" for i in range(len(values))]
        try:
            c.upsert(pa.table({"id": ids, "ts": [1] * len(ids), "v": pa.array(values, kind)}))
        except InputError:
            continue
        stored += 1
        arrow = c.read_arrow().sort_by("id").column("v").to_pylist()
        rows = [r["v"] for r in c.read().orderBy("id").collect()]
        for a, b in zip(arrow, rows, strict=True):
            if isinstance(a, dt.datetime) and a.tzinfo is not None:
                a = a.astimezone(dt.UTC).replace(tzinfo=None)  # Spark shows the session's zone
            if isinstance(b, decimal.Decimal) and isinstance(a, int):
                b = int(b)  # uint64 reads as decimal(20, 0)
            assert _same(a, b), (name, a, b)
    assert stored >= 15
