"""The validator: rebuild what the metadata table should say from storage and the global
timeline, and report every difference (design section 4's invariant, checked now).

Rebuild: every data file under the table's partition folders whose instant is a visible
commit is a version of its file group; a group's current file is its newest visible version,
unless a later visible commit emptied the group (its write status names no new file). From
the current files: the listing (name, size), the column statistics (recomputed from the
rows) and each key's location (partition, file id). The instant a key was inserted is not
derivable from files, so locations are compared on partition and file id.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metadata.records import Partition
from metadata.table import MetadataTable
from timeline.bodies import decode_body
from timeline.instant import Action
from timeline.layout import TimelineKind, parse_data_file_name
from timeline.table import TableTimelines
from writers.commit import CommitMetadata, schema_as_of
from writers.filegroup import RECORD_KEY, column_stats, read_parquet, virtual_key


def _data_files(table: TableTimelines) -> Iterator[tuple[str, str, int]]:
    """(partition path, file name, size) of every data file in storage."""
    fs, root = table.fs, table.layout.root
    for path, info in fs.find(root, detail=True).items():
        relative = path[len(root) :].lstrip("/")
        if relative.startswith(".braid/") or not relative.endswith(".parquet"):
            continue
        partition, _, name = relative.rpartition("/")
        yield partition, name, int(info["size"])


def rebuild_listing(table: TableTimelines) -> dict[str, dict[str, int]]:
    visibility = table.visibility()
    order = {i.time: n for n, i in enumerate(visibility.visible)}
    newest: dict[str, tuple[int, str, str, int]] = {}
    for partition, name, size in _data_files(table):
        parsed = parse_data_file_name(name)
        rank = order.get(parsed.instant)
        if rank is None:
            continue
        known = newest.get(parsed.file_id)
        if known is None or rank > known[0]:
            newest[parsed.file_id] = (rank, partition, name, size)
    emptied: dict[str, int] = {}  # file id -> rank of the commit that emptied the group
    for inst in visibility.visible:
        if inst.action is not Action.COMMIT:
            continue
        where = table.store.path_of(TimelineKind.GLOBAL, inst)
        body = decode_body(
            table.store.read_body(TimelineKind.GLOBAL, inst), CommitMetadata, where=where
        )
        for status in body.statuses:
            if status.file_name is None:
                emptied[status.file_id] = order[inst.time]
    listing: dict[str, dict[str, int]] = {}
    for file_id, (rank, partition, name, size) in newest.items():
        if emptied.get(file_id, -1) > rank:
            continue
        listing.setdefault(partition, {})[name] = size
    return listing


def validate(table: TableTimelines) -> list[str]:
    """Every difference between the metadata table (now) and a rebuild from storage."""
    problems: list[str] = []
    reader = MetadataTable(table).reader()
    expected = rebuild_listing(table)
    actual = reader.files()
    for partition in sorted(set(expected) | set(actual)):
        want, have = expected.get(partition, {}), actual.get(partition, {})
        for name in sorted(set(want) | set(have)):
            if want.get(name) != have.get(name):
                problems.append(
                    f"files: {partition}/{name}: storage says size {want.get(name)}, "
                    f"the metadata table says {have.get(name)}"
                )
    stats = {(s.partition, s.file, s.column): s for s in reader.column_stats()}
    locations: dict[str, tuple[str, str]] = {}
    schema = schema_as_of(table)
    columns = [f.name for f in schema]
    derive = virtual_key([(f.name, f.type, f.nullable) for f in schema], table.config.record_key)
    seen_stats = set()
    for partition, files in sorted(expected.items()):
        for name in sorted(files):
            path = table.layout.data_file(partition, name)
            rows = read_parquet(table.fs, path)
            with table.fs.open(path, "rb") as handle:
                meta = pq.ParquetFile(handle).metadata
            present = [c for c in columns if c in rows.column_names]
            for stat in column_stats(rows, meta, present):
                seen_stats.add((partition, name, stat.column))
                have = stats.get((partition, name, stat.column))
                got = (
                    None
                    if have is None
                    else (have.min_value, have.max_value, have.null_count, have.value_count)
                )
                want = (stat.min_value, stat.max_value, stat.null_count, stat.value_count)
                if got != want:
                    problems.append(
                        f"column_stats: {partition}/{name} {stat.column}: "
                        f"file says {want}, the metadata table says {got}"
                    )
            file_id = parse_data_file_name(name).file_id
            keys = rows.column(RECORD_KEY) if derive is None else rows.column(derive)
            for key in pc.unique(pc.cast(keys, pa.string())).to_pylist():
                if key in locations:
                    problems.append(f"record key {key!r} is in two files")
                locations[key] = (partition, file_id)
    for extra in sorted(set(stats) - seen_stats):
        problems.append(f"column_stats: {extra[0]}/{extra[1]} {extra[2]} has no visible file")
    found = reader.locations(sorted(locations))
    for key, (partition, file_id) in sorted(locations.items()):
        where = found.get(key)
        if where is None or (where.partition, where.file_id) != (partition, file_id):
            problems.append(
                f"record_index: key {key!r} is in {partition} file group "
                f"{file_id}, the index says {where}"
            )
    index = reader.point.group_counts["record_index"]
    for group in range(index):
        indexed = reader.group_table(Partition.RECORD_INDEX, group).column("key").to_pylist()
        for key in indexed:
            if key not in locations:
                problems.append(f"record_index: key {key!r} is indexed but in no visible file")
    return problems
