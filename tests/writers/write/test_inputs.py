"""The input checks of every write (``writers.write.inputs``): a NaN precombine value is
refused like a null one. NaN is neither higher nor lower than any value, and before this check
the engines' orderings disagreed on it: a stored NaN lost to a later 1.0 in a copy-on-write
table and won in a merge-on-read one, and within one batch 1.0 won."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError
from lakebraid.writers.write.inputs import nan_count

TYPES = ["copy_on_write", "merge_on_read"]


def rows(ids: list[str], ts: list[float], v: int) -> pa.Table:
    return pa.table({"id": ids, "ts": pa.array(ts, pa.float64()), "v": [v] * len(ids)})


def table(tmp_path: Path, kind: str) -> WriteClient:
    client = WriteClient.create(str(tmp_path / kind), "id", [], "ts", table_type=kind)
    client.bulk_insert(rows(["a", "b"], [1.0, 2.0], 0))
    return client


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("op", ["upsert", "insert", "bulk_insert"])
def test_a_nan_precombine_value_is_refused_by_name_and_nothing_is_written(tmp_path, kind, op):
    client = table(tmp_path, kind)
    before, timeline = client.read_arrow().sort_by("id"), client.timeline()
    given = rows(["a", "c", "d"], [3.0, math.nan, 4.0], 1)  # one bad row among good ones
    with pytest.raises(InputError, match=r"1 rows have a NaN precombine value 'ts'") as raised:
        getattr(WriteClient.open(client.path), op)(given)
    assert raised.value.table == client.path
    after = WriteClient.open(client.path)
    assert after.timeline() == timeline
    assert after.read_arrow().sort_by("id").equals(before)


@pytest.mark.parametrize("kind", TYPES)
def test_infinities_order_like_any_value_on_both_table_types(tmp_path, kind):
    client = table(tmp_path, kind)
    WriteClient.open(client.path).upsert(rows(["a"], [math.inf], 1))  # newer than 1.0
    WriteClient.open(client.path).upsert(rows(["a"], [5.0], 2))  # older than inf: kept out
    WriteClient.open(client.path).upsert(rows(["b"], [-math.inf], 3))  # older than 2.0
    read = WriteClient.open(client.path).read_arrow().to_pylist()
    got = {r["id"]: (r["ts"], r["v"]) for r in read}
    assert got == {"a": (math.inf, 1), "b": (2.0, 0)}


def test_nan_count_counts_floating_nans_only():
    assert nan_count(pa.array([1.0, math.nan, None, math.nan], pa.float32())) == 2
    assert nan_count(pa.chunked_array([[math.nan], [1.0]], pa.float64())) == 1
    assert nan_count(pa.array([1, 2])) == 0
    assert nan_count(pa.array(["nan"])) == 0


def test_a_table_read_written_back_is_refused_with_what_to_drop(tmp_path: Path) -> None:
    client = WriteClient.create(str(tmp_path / "t"), "id", [], None)
    client.upsert(pa.table({"id": ["a"], "v": [1]}))
    read = client.read_arrow()
    with pytest.raises(InputError, match=r"_braid_commit_time.*drop them before writing"):
        client.upsert(read)
    assert client.upsert(read.drop_columns(["_braid_commit_time", "_braid_record_key"]))


def test_nanosecond_timestamps_in_lists_are_stored_as_microseconds_or_refused(tmp_path):
    from lakebraid.writers.write.inputs import normalize_input

    exact = pa.array([[1_700_000_000_123_456_000], None, []], pa.list_(pa.timestamp("ns", "UTC")))
    stored = normalize_input(pa.table({"v": exact}), table="t").column("v")
    assert stored.type == pa.list_(pa.timestamp("us", "UTC"))
    assert stored.to_pylist() == exact.to_pylist()  # the same instants
    finer = pa.array([[1_700_000_000_123_456_789]], pa.list_(pa.timestamp("ns")))
    client = WriteClient.create(str(tmp_path / "t"), record_key="id")
    with pytest.raises(InputError, match=r"column 'v'.*round it to microseconds"):
        client.upsert(pa.table({"id": ["a"], "v": finer}))
    assert client.read_arrow().num_rows == 0  # nothing written


def test_a_decimal_of_negative_scale_is_refused_by_name(tmp_path):
    client = WriteClient.create(str(tmp_path / "t"), record_key="id")
    values = pa.array([1000], pa.decimal128(5, -2))
    with pytest.raises(InputError, match=r"column 'v'.*negative scale.*decimal128\(7, 0\)"):
        client.upsert(pa.table({"id": ["a"], "v": values}))
    client.upsert(pa.table({"id": ["a"], "v": values.cast(pa.decimal128(7, 0))}))
    assert client.read_arrow()["v"].to_pylist() == [1000]
