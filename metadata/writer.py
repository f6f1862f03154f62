"""The metadata writer: the changes of one data-table instant -> log blocks in file groups.

The write client calls :func:`write_changes` between the data table's inflight and completed
states of instant ``t``; each touched file group gets one log file ``<group>_<t>.log`` holding
one data block with that group's records, sorted by key. Nothing here is visible until the
global timeline completes ``t``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from metadata.hashing import file_group_id, file_groups_of
from metadata.logblock import BlockType, append_blocks, encode_block
from metadata.records import (
    ALL_PARTITIONS_KEY,
    ColumnStatsRecord,
    FilesRecord,
    MetadataRecord,
    Partition,
    RecordIndexRecord,
    file_id_to_ints,
    instant_to_int,
)
from timeline.layout import TableLayout


@dataclass
class InstantChanges:
    """What one data-table instant changed, as the metadata table records it.

    ``index_upserts`` is an Arrow table with string columns ``key``, ``partition`` and
    ``file_id`` (the location of each inserted, updated or moved key as of this instant);
    ``index_deletes`` the keys deleted. A key may not be in both."""

    files_added: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    files_deleted: Mapping[str, Sequence[str]] = field(default_factory=dict)
    partitions_deleted: Sequence[str] = ()
    column_stats: Sequence[ColumnStatsRecord] = ()
    index_upserts: pa.Table | None = None
    index_deletes: Sequence[str] | pa.Array = ()


class WrittenLog(msgspec.Struct, frozen=True):
    """One log file written for an instant (kept in the instant's body for rollback)."""

    partition: str
    file_group: str
    name: str
    size: int
    records: int


def files_records(changes: InstantChanges) -> list[FilesRecord]:
    touched = sorted(set(changes.files_added) | set(changes.files_deleted))
    records = [
        FilesRecord(
            p,
            dict(sorted(changes.files_added.get(p, {}).items())),
            sorted(changes.files_deleted.get(p, ())),
        )
        for p in touched
    ]
    if changes.files_added or changes.partitions_deleted:
        records.append(
            FilesRecord(
                ALL_PARTITIONS_KEY,
                {p: 0 for p in sorted(changes.files_added)},
                sorted(changes.partitions_deleted),
            )
        )
    return records


def index_records(changes: InstantChanges, instant: str) -> list[RecordIndexRecord]:
    deletes = pa.array(changes.index_deletes, pa.string())
    records = [RecordIndexRecord.tombstone(k, instant) for k in deletes.to_pylist()]
    upserts = changes.index_upserts
    if upserts is not None and upserts.num_rows:
        if pc.any(pc.is_in(upserts.column("key"), value_set=deletes)).as_py():
            raise ValueError(f"instant {instant}: a key is both upserted and deleted")
        at = instant_to_int(instant)
        ids = {f: file_id_to_ints(f) for f in pc.unique(upserts.column("file_id")).to_pylist()}
        cols = upserts.select(["key", "partition", "file_id"]).to_pydict()
        records.extend(
            RecordIndexRecord(key, part, *ids[fid], at)
            for key, part, fid in zip(cols["key"], cols["partition"], cols["file_id"], strict=True)
        )
    return records


def route(
    partition: Partition, records: Sequence[MetadataRecord], n_groups: int
) -> dict[str, list[MetadataRecord]]:
    """Records by file group id, each list sorted by key; duplicate keys are refused."""
    by_group: dict[str, list[MetadataRecord]] = defaultdict(list)
    if not records:
        return by_group
    keys = [r.key for r in records]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{partition}: a key appears twice in one instant's changes")
    indexes = file_groups_of(keys, n_groups)
    names = {int(i): file_group_id(str(partition), int(i)) for i in set(indexes.tolist())}
    for record, index in zip(records, indexes.tolist(), strict=True):
        by_group[names[index]].append(record)
    for group in by_group.values():
        group.sort(key=lambda r: r.key)
    return by_group


def write_changes(
    fs: AbstractFileSystem,
    layout: TableLayout,
    instant: str,
    changes: InstantChanges,
    group_counts: Mapping[str, int],
) -> list[WrittenLog]:
    """Write the log blocks of one instant; returns the log files written."""
    per_partition: dict[Partition, list[MetadataRecord]] = {
        Partition.FILES: list(files_records(changes)),
        Partition.COLUMN_STATS: list(changes.column_stats),
        Partition.RECORD_INDEX: list(index_records(changes, instant)),
    }
    written = []
    for partition, records in per_partition.items():
        groups = route(partition, records, group_counts[str(partition)])
        for group, group_records in sorted(groups.items()):
            blob = encode_block(
                BlockType.DATA,
                instant=instant,
                partition=partition,
                file_group=group,
                records=group_records,
            )
            path = layout.metadata_log_file(str(partition), group, instant)
            append_blocks(fs, path, [blob])
            name = path.rsplit("/", 1)[-1]
            written.append(WrittenLog(str(partition), group, name, len(blob), len(group_records)))
    return written
