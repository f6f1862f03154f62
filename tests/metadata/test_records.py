"""Metadata records: merge rules, compact encodings, the record codec."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.errors import MetadataFormatError
from lakebraid.metadata.records import (
    ALL_PARTITIONS_KEY,
    RECORD_TYPES,
    SCHEMA_VERSION,
    ColumnStatsRecord,
    FilesRecord,
    Partition,
    RecordIndexRecord,
    RecordLocation,
    column_stats_key,
    decode_records,
    encode_records,
    file_id_to_ints,
    instant_to_int,
    int_to_instant,
    ints_to_file_id,
    merge_records,
)

FAST = settings(max_examples=150, deadline=None)
INT64 = st.integers(-(2**63), 2**63 - 1)
T1, T2 = "20240101000000000", "20240102000000000"


# -- files --------------------------------------------------------------------------------


def test_files_merge_is_cumulative() -> None:
    older = FilesRecord("day=1", {"a.parquet": 10, "b.parquet": 20}, [])
    newer = FilesRecord("day=1", {"c.parquet": 30}, ["a.parquet"])
    merged = FilesRecord.merge(older, newer)
    assert merged == FilesRecord("day=1", {"b.parquet": 20, "c.parquet": 30}, ["a.parquet"])
    assert merged.full_state() == FilesRecord("day=1", {"b.parquet": 20, "c.parquet": 30}, [])


def test_files_deleted_and_readded_in_newer_stays_added_with_new_size() -> None:
    older = FilesRecord("", {"a": 1}, [])
    newer = FilesRecord("", {"a": 5}, ["a"])
    assert merge_records(Partition.FILES, older, newer) == FilesRecord("", {"a": 5}, [])


def test_files_record_never_disappears() -> None:
    older = FilesRecord("p", {"a": 1}, [])
    merged = merge_records("files", older, FilesRecord("p", {}, ["a"]))
    assert merged == FilesRecord("p", {}, ["a"])
    assert merge_records("files", None, FilesRecord("p", {}, ["a"])) is not None


def test_all_partitions_record_is_a_files_record() -> None:
    first = FilesRecord(ALL_PARTITIONS_KEY, {"day=1": 0, "day=2": 0}, [])
    second = FilesRecord(ALL_PARTITIONS_KEY, {"day=3": 0}, ["day=1"])
    merged = merge_records("files", first, second)
    assert merged is not None and sorted(merged.added) == ["day=2", "day=3"]


names = st.sampled_from(["a", "b", "c", "d", "e"])
files_records = st.builds(
    FilesRecord,
    st.just("p"),
    st.dictionaries(names, st.integers(0, 100), max_size=4),
    st.lists(names, max_size=4, unique=True),
)


@FAST
@given(st.lists(files_records, min_size=1, max_size=8))
def test_files_fold_matches_a_set_model(records: list[FilesRecord]) -> None:
    model: dict[str, int] = {}
    merged: FilesRecord | None = None
    for record in records:
        for name in record.deleted:
            model.pop(name, None)
        model.update(record.added)
        merged = FilesRecord.merge(merged, record)
    assert merged is not None and merged.added == model
    assert not set(merged.deleted) & set(merged.added)


@FAST
@given(files_records, files_records, files_records)
def test_files_merge_is_associative(a: FilesRecord, b: FilesRecord, c: FilesRecord) -> None:
    left = FilesRecord.merge(FilesRecord.merge(a, b), c)
    right = FilesRecord.merge(a, FilesRecord.merge(b, c))
    assert left == right


# -- column stats -------------------------------------------------------------------------


def test_column_stats_newest_wins_and_tombstones_delete() -> None:
    old = ColumnStatsRecord("x", "p", "f", 1, 9, 0, 10, 100)
    new = ColumnStatsRecord("x", "p", "f", 2, 8, 1, 10, 90)
    assert merge_records("column_stats", old, new) == new
    dead = ColumnStatsRecord.tombstone("x", "p", "f")
    assert merge_records("column_stats", new, dead) is None
    assert merge_records("column_stats", None, dead) is None
    assert merge_records("column_stats", new, dead, keep_tombstones=True) == dead
    assert merge_records("column_stats", dead, old) == old


safe_text = st.text(
    st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=6
)


@FAST
@given(st.lists(st.tuples(safe_text, safe_text, safe_text), min_size=2, max_size=20))
def test_column_stats_key_sorts_like_the_tuple(triples: list[tuple[str, str, str]]) -> None:
    by_key = sorted(set(triples), key=lambda t: column_stats_key(*t))
    assert by_key == sorted(set(triples))
    assert len({column_stats_key(*t) for t in triples}) == len(set(triples))


def test_column_stats_key_rejects_nul() -> None:
    with pytest.raises(ValueError):
        column_stats_key("a\x00b", "p", "f")


def test_column_stats_temporal_and_binary_values_round_trip() -> None:
    values = [
        (dt.date(1, 1, 1), dt.date(9999, 12, 31)),
        (dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(2100, 1, 1, 1, 2, 3, 4)),
        (dt.datetime(2024, 5, 1, tzinfo=dt.UTC), dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)),
        (b"\x00\xff", b"zz"),
        (None, True),
        (-(2**63), 2**64 - 1),
        (-1.5, "\u00e9t\u00e9"),
    ]
    records = [
        ColumnStatsRecord("c", "p", f"f{i}", lo, hi, 0, 1, 2) for i, (lo, hi) in enumerate(values)
    ]
    decoded = decode_records("column_stats", encode_records("column_stats", records))
    assert decoded == records
    for got, want in zip(decoded, records, strict=True):
        assert type(got.min_value) is type(want.min_value)
        assert type(got.max_value) is type(want.max_value)


def test_aware_datetimes_decode_as_the_same_instant_in_utc() -> None:
    paris = dt.timezone(dt.timedelta(hours=2))
    record = ColumnStatsRecord("c", "p", "f", dt.datetime(2024, 5, 1, 14, tzinfo=paris), 1, 0, 1, 2)
    (decoded,) = decode_records("column_stats", encode_records("column_stats", [record]))
    assert decoded.min_value == dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    assert decoded.min_value.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize(
    "bad",
    [dt.time(1), 2**64, 1 + 2j, [1], Decimal("NaN"), Decimal("-Infinity"), Decimal("1" * 101)],
)
def test_column_stats_refuse_values_the_format_cannot_hold(bad: object) -> None:
    record = ColumnStatsRecord("c", "p", "f", bad, None, 0, 1, 2)
    with pytest.raises((TypeError, ValueError, OverflowError)):
        encode_records("column_stats", [record])


# -- record index -------------------------------------------------------------------------


def test_record_index_location_round_trip() -> None:
    file_id = str(uuid.uuid4())
    location = RecordLocation("day=2024-01-01", file_id, T1)
    record = RecordIndexRecord.of("k1", location)
    assert record.location == location and record.file_id == file_id
    assert record.instant == int(T1)


@FAST
@given(st.uuids())
def test_file_id_int_round_trip(value: uuid.UUID) -> None:
    hi, lo = file_id_to_ints(str(value))
    assert -(2**63) <= hi < 2**63 and -(2**63) <= lo < 2**63
    assert ints_to_file_id(hi, lo) == str(value)


@FAST
@given(INT64, INT64)
def test_ints_file_id_round_trip(hi: int, lo: int) -> None:
    assert file_id_to_ints(ints_to_file_id(hi, lo)) == (hi, lo)


@pytest.mark.parametrize(
    "bad",
    ["not-a-uuid", "3F2504E0-4F89-11D3-9A0C-0305E82C3301", "3f2504e04f8911d39a0c0305e82c3301"],
)
def test_file_id_must_be_a_canonical_uuid(bad: str) -> None:
    with pytest.raises(ValueError):
        file_id_to_ints(bad)


def test_ints_out_of_int64_are_refused() -> None:
    with pytest.raises(ValueError):
        ints_to_file_id(2**63, 0)
    with pytest.raises(ValueError):
        encode_records("record_index", [RecordIndexRecord("k", "p", 2**63, 0, 1)])


@FAST
@given(st.integers(0, 10**17 - 1))
def test_instant_int_round_trip(value: int) -> None:
    assert instant_to_int(int_to_instant(value)) == value


@pytest.mark.parametrize("bad", ["2024", "2024010100000000x", "1" * 18, "\u0661" * 17])
def test_instant_must_be_17_ascii_digits(bad: str) -> None:
    with pytest.raises(ValueError):
        instant_to_int(bad)


ops = st.lists(
    st.tuples(st.sampled_from(["k1", "k2", "k3"]), st.booleans(), INT64, st.integers(0, 99)),
    max_size=30,
)


def _record(key: str, delete: bool, hi: int, n: int) -> RecordIndexRecord:
    instant = f"2024{n:013d}"
    if delete:
        return RecordIndexRecord.tombstone(key, instant)
    return RecordIndexRecord(key, f"p{n}", hi, -hi - 1, int(instant))


@FAST
@given(ops)
def test_record_index_fold_matches_a_dict_model(operations: list) -> None:
    model: dict[str, tuple[str, int, int, int]] = {}
    state: dict[str, RecordIndexRecord] = {}
    for key, delete, hi, n in operations:
        record = _record(key, delete, hi, n)
        if delete:
            model.pop(key, None)
        else:
            model[key] = (record.partition, record.file_id_hi, record.file_id_lo, record.instant)
        merged = merge_records("record_index", state.get(key), record)
        if merged is None:
            state.pop(key, None)
        else:
            state[key] = merged
    assert {k: (r.partition, r.file_id_hi, r.file_id_lo, r.instant) for k, r in state.items()} == (
        model
    )


@FAST
@given(ops, ops)
def test_folding_logs_with_kept_tombstones_then_base_equals_one_by_one(base_ops, log_ops) -> None:
    base: dict[str, RecordIndexRecord] = {}
    for op in base_ops:
        record = _record(*op)
        merged = merge_records("record_index", base.get(record.key), record)
        base.pop(record.key, None) if merged is None else base.__setitem__(record.key, merged)
    one_by_one, folded = dict(base), {}
    for op in log_ops:
        record = _record(*op)
        merged = merge_records("record_index", one_by_one.get(record.key), record)
        if merged is None:
            one_by_one.pop(record.key, None)
        else:
            one_by_one[record.key] = merged
        folded[record.key] = merge_records(
            "record_index", folded.get(record.key), record, keep_tombstones=True
        )
    applied = dict(base)
    for key, record in folded.items():
        merged = merge_records("record_index", applied.get(key), record)
        applied.pop(key, None) if merged is None else applied.__setitem__(key, merged)
    assert applied == one_by_one


def test_merge_refuses_other_keys_and_types() -> None:
    a = RecordIndexRecord("a", "p", 1, 2, 3)
    with pytest.raises(ValueError):
        merge_records("record_index", a, RecordIndexRecord("b", "p", 1, 2, 3))
    with pytest.raises(TypeError):
        merge_records("files", a, a)
    with pytest.raises(ValueError):
        merge_records("no_such_partition", a, a)


def test_record_types_cover_every_partition() -> None:
    assert set(RECORD_TYPES) == set(Partition)
    assert [str(p) for p in Partition] == [
        "files",
        "column_stats",
        "record_index",
        "secondary_index",
    ]


def test_codec_refuses_foreign_records_and_unknown_schema_versions() -> None:
    with pytest.raises(TypeError):
        encode_records("files", [RecordIndexRecord("a", "p", 1, 2, 3)])
    body = encode_records("files", [FilesRecord("p", {"a": 1}, [])])
    with pytest.raises(MetadataFormatError):
        decode_records("files", body, SCHEMA_VERSION + 1)
