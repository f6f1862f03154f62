"""A record-index log file as columns (``metadata.logcache.index_log_table``): blocks of
records, tombstones and delete keys, columnar or not, give one row per key, sorted by key,
the newest block's entry winning -- checked against a dict model; and the sorted match a
lookup does on those columns finds exactly the wanted keys the model holds."""

from __future__ import annotations

import tempfile

import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.arrow_records import KEY
from lakebraid.metadata.keymatch import KeyMatcher
from lakebraid.metadata.keyorder import wanted_keys
from lakebraid.metadata.logblock import BlockType, iter_blocks
from lakebraid.metadata.logcache import LOGS, index_log_table
from lakebraid.metadata.logwrite import encode_block
from lakebraid.metadata.records import Partition, RecordIndexRecord

INSTANT = "20240101000000000"
KEYS = st.sampled_from([f"key-{i:03d}" for i in range(40)]) | st.text(min_size=1, max_size=6)
BLOCK = st.tuples(
    st.sampled_from(["records", "columns", "delete"]),
    st.lists(
        st.tuples(KEYS, st.booleans(), st.integers(0, 9)), max_size=30, unique_by=lambda e: e[0]
    ),
)


def encoded(kind: str, entries: list[tuple[str, bool, int]]) -> bytes:
    common = {"instant": INSTANT, "partition": Partition.RECORD_INDEX, "file_group": "g-0000"}
    entries = sorted(entries)
    if kind == "delete":
        return encode_block(BlockType.DELETE, keys=[k for k, _, _ in entries], **common)
    records = [
        RecordIndexRecord.tombstone(k, INSTANT) if gone else RecordIndexRecord(k, f"p{n}", n, -n, n)
        for k, gone, n in entries
    ]
    if kind == "records":
        return encode_block(BlockType.DATA, records=records, **common)
    columns = pa.Table.from_pylist(
        [{f: getattr(r, f) for f in r.__struct_fields__} for r in records]
    )
    return encode_block(BlockType.DATA, columns=columns, min_columnar=0, **common)


def model(blocks: list[tuple[str, list[tuple[str, bool, int]]]]) -> dict[str, tuple]:
    """key -> (partition, hi, lo, deleted) of the newest entry; delete keys are tombstones."""
    state: dict[str, tuple] = {}
    for kind, entries in blocks:
        for key, gone, n in entries:
            deleted = kind == "delete" or gone
            state[key] = ("", 0, 0, True) if deleted else (f"p{n}", n, -n, False)
    return state


@settings(max_examples=150, deadline=None)
@given(st.lists(BLOCK, min_size=1, max_size=5), st.lists(KEYS, max_size=20))
def test_one_row_per_key_sorted_newest_wins_and_lookups_match(blocks, asked) -> None:
    data = b"".join(encoded(kind, entries) for kind, entries in blocks if entries)
    table = index_log_table(list(iter_blocks(data)))
    expected = model(blocks)
    keys = table.column(KEY).to_pylist()
    assert keys == sorted(expected, key=str.encode)
    for row in table.to_pylist():
        partition, hi, lo, deleted = expected[row["key"]]
        assert row["deleted"] == deleted
        if not deleted:
            assert (row["partition"], row["file_id_hi"], row["file_id_lo"]) == (partition, hi, lo)
    if asked:
        wanted = wanted_keys(pa.array(asked, pa.string()), pa.string(), unique=False)
        rows, _ = KeyMatcher(wanted).match(table.column(KEY))
        assert sorted(keys[i] for i in rows) == sorted(set(asked) & set(expected))


FIXED = st.sampled_from([f"key-{i:03d}" for i in range(40)])  # one width: a sorted run


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["records", "columns", "delete"]),
            st.lists(
                st.tuples(FIXED, st.booleans(), st.integers(0, 9)),
                min_size=1,
                max_size=30,
                unique_by=lambda e: e[0],
            ),
        ),
        min_size=1,
        max_size=4,
    ),
    st.lists(FIXED, min_size=1, max_size=20, unique=True),
)
def test_the_cached_sorted_run_of_a_log_file_matches_like_its_keys(blocks, asked) -> None:
    """``LOGS.index_run`` (the run a lookup matches against, cached with the file's
    columns) finds the asked keys the model holds, as a match of the columns does."""
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/g-0000.log.1"
        data = b"".join(encoded(kind, entries) for kind, entries in blocks)
        with open(path, "wb") as out:
            out.write(data)
        fs = LocalFileSystem()
        run = LOGS.index_run(fs, path, len(data))
        keys = LOGS.index_table(fs, path, len(data)).column(KEY).to_pylist()
    assert run is not None
    wanted = wanted_keys(pa.array(asked, pa.string()), pa.string(), unique=True)
    rows, hits = KeyMatcher(wanted).match_run(run)
    assert [keys[i] for i in rows] == [wanted[i].as_py() for i in hits]
    assert sorted(keys[i] for i in rows) == sorted(set(asked) & set(model(blocks)))
