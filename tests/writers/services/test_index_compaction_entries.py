"""Inline compaction of the record index weighs entries, not bytes: sequential keys compress
to a fraction of a byte per entry in a base, so by bytes eight small appends looked like half
the base and the whole index was rewritten every eight commits (a cost growing with the
table). By entries it waits until the logs hold half the base's entries."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lakebraid.metadata import compaction as compaction_module
from lakebraid.metadata.compaction import log_records
from lakebraid.metadata.records import Partition
from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.client import WriteClient


def rows(start: int, count: int) -> pa.Table:
    ids = range(start, start + count)
    return pa.table({"id": [f"ev-{i:010d}" for i in ids], "v": list(ids)})


def record_index_bases(path: str) -> int:
    return len(list(Path(path, ".braid/metadata/record_index").glob("*.parquet")))


def appended(tmp_path: Path, **options: object) -> tuple[WriteClient, int]:
    """40,000 keys in one bulk insert (the index's commit bases), then 8 appends of 500;
    the table and its record-index base files after the first write."""
    path = str(tmp_path / "t")
    WriteClient.create(path, "id", [], None, **{"index.expected.records": 50_000, **options})
    WriteClient.open(path).bulk_insert(rows(0, 40_000))
    first = record_index_bases(path)
    for n in range(8):
        WriteClient.open(path).bulk_insert(rows(40_000 + 500 * n, 500))
    return WriteClient.open(path), first


def test_eight_small_appends_do_not_rewrite_a_large_index(tmp_path: Path) -> None:
    client, first = appended(tmp_path, **{"metadata.compact.small.base.entries": 1000})
    assert first > 0
    assert record_index_bases(client.path) == first  # 4,000 logged < half of 40,000: waits
    keys = ["ev-0000000000", "ev-0000039999", "ev-0000043999", "ev-0000044000"]
    found = client.lookup(keys)
    assert [found[k] is not None for k in keys] == [True, True, True, False]


def test_a_base_small_in_entries_folds_at_the_count_limit(tmp_path: Path) -> None:
    client, first = appended(tmp_path, **{"metadata.compact.small.base.entries": 10**9})
    assert record_index_bases(client.path) > first


def test_the_logs_entries_are_estimated_from_one_log(tmp_path: Path, monkeypatch) -> None:
    """A waiting group's log entries: its newest log's bytes per entry times all its logs'
    bytes (one log read, whatever the count), within a few percent of the exact count."""
    client, _ = appended(tmp_path, **{"metadata.compact.small.base.entries": 1000})
    reader = MetadataTable(client.table).reader()
    folder = reader.folder(Partition.RECORD_INDEX)
    pieces = [p for p in reader.slices(Partition.RECORD_INDEX) if p.logs]
    assert pieces and all(len(p.logs) == 8 for p in pieces)
    read: list[str] = []

    def counted(fs, path: str) -> int:
        read.append(path)
        return log_records(fs, path)

    monkeypatch.setattr(compaction_module, "log_records", counted)
    for piece in pieces:
        estimate = compaction_module._entries(reader, Partition.RECORD_INDEX, piece)
        exact = sum(log_records(client.table.fs, f"{folder}/{name}") for name in piece.logs)
        assert abs(estimate.logs - exact) <= 0.05 * exact
        assert estimate.base > 0
    assert len(read) == len(pieces)  # one log file read per group
