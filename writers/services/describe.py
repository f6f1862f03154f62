"""What a table is and holds (``lakebraid show``, ``WriteClient.show``), as one plain dict.

Where each figure comes from (none reads a data file):

* ``table``: ``table.json`` and the schema of the latest visible commit;
* ``data``: partitions, files and bytes from the metadata table's ``files`` partition; rows
  from its ``column_stats`` (null plus non-null values of the record key column per file).
  A partition with merge-on-read logs has no ``rows`` (None: only a merge knows how many of
  its logs' rows update or delete base rows) but ``base_rows`` and ``log_rows``, the data
  rows its logs hold (deletes not subtracted);
* ``bytes_on_disk``: one recursive listing of the table folder (sizes as the listing gives
  them): data files (every version the cleaner has not removed yet), each metadata partition,
  the three timelines, and the rest of ``.braid``;
* ``record_index``: per file group, the entries of its base file (Parquet footer: exact) and
  the records of the log files since it (log block headers, not merged: a key upserted
  twice or deleted counts each time; so the group holds at most base + log records);
* ``indexes``: secondary indexes and built column statistics as of now;
* ``services``: the latest clean, compaction, reindex and index instants, pending instants
  (a metadata compaction with ``abandoned_by``: the instant that means it never completes,
  ``metadata.compaction.abandoned_by``; None: running, or its writer died),
  what is due next (metadata compaction by ``metadata.compact.max.log.*``, the record index's
  resize, commits since the latest clean) and the services' settings.
"""

from __future__ import annotations

from typing import Any

from fsspec import AbstractFileSystem

from lakebraid.metadata import settings as meta_settings
from lakebraid.metadata.basefile import base_info
from lakebraid.metadata.commits import schema_as_of
from lakebraid.metadata.compaction import abandoned_by, log_records
from lakebraid.metadata.compaction_policy import LogPolicy, base_bytes
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import Partition
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline import archiver
from lakebraid.timeline import config as cfg
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines

SERVICE_SETTINGS = ("archive.", "clean.", "metadata.compact.", "metadata.record_index.")


def describe(table: TableTimelines, metadata: MetadataTable) -> dict[str, Any]:
    """The table's description (see the module doc); reads as of now."""
    reader = metadata.reader()
    point = reader.point
    ri = record_index(reader)
    return {
        "path": table.path,
        "table": table_part(table),
        "data": data_part(reader, table.config.record_key),
        "bytes_on_disk": bytes_on_disk(table),
        "record_index": ri,
        "indexes": {"secondary": dict(point.secondary), "column_stats": dict(point.stats_columns)},
        "services": services(table, reader, ri),
    }


def table_part(table: TableTimelines) -> dict[str, Any]:
    config = table.config
    latest = table.visibility().latest()
    return {
        "name": config.name,
        "format_version": config.format_version,
        "table_type": config.table_type,
        "record_key": config.record_key,
        "partition_fields": list(config.partition_fields),
        "precombine_field": config.precombine_field,
        "index_scope": config.index.record_index_scope,
        "created_at": config.created_at,
        "latest_visible": None if latest is None else latest.time,
        "schema": [
            {"name": f.name, "type": f.type, "nullable": f.nullable} for f in schema_as_of(table)
        ],
        "options": {k: str(v) for k, v in table.options.given().items()},
    }


def data_part(reader: MetadataReader, record_key: str) -> dict[str, Any]:
    """Partitions, files, rows and bytes of the current data files (metadata table only)."""
    listing = reader.files()
    rows = _rows_per_file(reader, record_key)
    if any((p, n) not in rows for p, files in listing.items() for n in files):
        rows = _rows_per_file(reader, None)  # the key column has no statistics: any column
    parts = {}
    for partition, files in sorted(listing.items()):
        bases = [rows.get((partition, n)) for n in files if not n.endswith(".log")]
        # a merge-on-read log's rows may update or delete its base's: no count without a
        # merge; its data rows are in the column statistics (a log of deletes only has none)
        logs = [rows.get((partition, n), 0) for n in files if n.endswith(".log")]
        base_rows = None if None in bases else sum(bases)  # type: ignore[arg-type]
        parts[partition] = {
            "files": len(files),
            "rows": base_rows if not logs else None,
            "base_rows": base_rows,
            "log_rows": sum(logs),
            "bytes": sum(files.values()),
        }
    known = [p["rows"] for p in parts.values()]
    based = [p["base_rows"] for p in parts.values()]
    return {
        "partitions": len(parts),
        "files": sum(p["files"] for p in parts.values()),
        "rows": None if None in known else sum(known),  # type: ignore[arg-type]
        "base_rows": None if None in based else sum(based),  # type: ignore[arg-type]
        "log_rows": sum(p["log_rows"] for p in parts.values()),
        "bytes": sum(p["bytes"] for p in parts.values()),
        "by_partition": parts,
    }


def _rows_per_file(reader: MetadataReader, column: str | None) -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for stat in reader.column_stats(column):
        found[(stat.partition, stat.file)] = stat.null_count + stat.value_count
    return found


def bytes_on_disk(table: TableTimelines) -> dict[str, Any]:
    """Bytes and files under the table folder by part, from one recursive listing."""
    fs: AbstractFileSystem = table.fs
    root = table.layout.root.rstrip("/")
    found = fs.find(root, detail=True)
    parts: dict[str, dict[str, int]] = {}
    for path, entry in found.items():
        relative = path[len(root) :].lstrip("/")
        part = _part_of(relative)
        slot = parts.setdefault(part, {"files": 0, "bytes": 0})
        slot["files"] += 1
        slot["bytes"] += int(entry.get("size") or 0)
    total = {
        "files": sum(p["files"] for p in parts.values()),
        "bytes": sum(p["bytes"] for p in parts.values()),
    }
    return {"total": total, "by_part": dict(sorted(parts.items()))}


def _part_of(relative: str) -> str:
    """The part of the table a path (relative to the root) belongs to."""
    if not relative.startswith(".braid/"):
        return "data"
    rest = relative[len(".braid/") :]
    if rest.startswith("metadata/.braid/timeline/"):
        return "timeline: metadata"
    if rest.startswith("metadata/"):
        return f"metadata: {rest.split('/')[1]}"
    if rest.startswith("global/"):
        return "timeline: global"
    if rest.startswith("timeline/"):
        return "timeline: data"
    if rest.startswith("archive/"):
        return "timeline: archive"
    return ".braid: other"  # table.json, clock, lock, heartbeats, markers, staging


def record_index(reader: MetadataReader) -> dict[str, Any]:
    """Entries per record-index file group: base entries (footer) and log records (headers)."""
    fs, folder = reader.fs, reader.folder(Partition.RECORD_INDEX)
    groups = []
    for piece in reader.slices(Partition.RECORD_INDEX):
        base = 0 if piece.base is None else base_info(fs, f"{folder}/{piece.base}").num_rows
        logged = sum(log_records(fs, f"{folder}/{name}") for name in piece.logs)
        groups.append(
            {
                "file_group": piece.file_group,
                "base_entries": base,
                "log_files": len(piece.logs),
                "log_bytes": piece.log_bytes,
                "log_records": logged,
            }
        )
    return {
        "file_groups": len(groups),
        "base_entries": sum(g["base_entries"] for g in groups),
        "log_records": sum(g["log_records"] for g in groups),
        "groups": groups,
    }


def services(table: TableTimelines, reader: MetadataReader, ri: dict[str, Any]) -> dict[str, Any]:
    """What the table services last did, what is pending, and what is due next."""
    glob, meta = table.timeline(TimelineKind.GLOBAL), table.timeline(TimelineKind.METADATA)
    last: dict[str, Any] = {}
    for timeline, action in (
        (glob, Action.CLEAN),
        (meta, Action.COMPACTION),
        (meta, Action.REINDEX),
        (meta, Action.INDEX),
    ):
        done = [i for i in timeline.completed() if i.action is action]
        latest = max(done, key=lambda i: i.completion_time or "", default=None)
        last[action.value] = (
            None if latest is None else {"time": latest.time, "completed": latest.completion_time}
        )
    pending = [
        {"time": i.time, "action": i.action.value, "state": i.state.value}
        | (
            {"abandoned_by": abandoned_by(table.store, meta, i)}
            if i.action is Action.COMPACTION
            else {}
        )
        for timeline in (glob, meta)
        for i in timeline
        if i.is_pending and i.action is not Action.DELTACOMMIT
    ]
    cleaned = (last["clean"] or {}).get("completed") or ""
    since = [
        i
        for i in table.visibility().visible
        if i.action is Action.COMMIT and (i.completion_time or "") > cleaned
    ]
    savepoints = sorted(table.savepointed())  # the commits they keep
    return {
        "last": last,
        "pending": pending,
        "savepoints": savepoints,
        "next": {
            "compaction": compaction_due(table, reader),
            "resize": resize_due(table, ri),
            "clean": {"commits_since_last_clean": len(since)},
            "archive": archive_due(table),
        },
        "settings": {
            name: key_value(table.options, name)
            for name in sorted(cfg.REGISTRY)
            if name.startswith(SERVICE_SETTINGS)
        },
    }


def archive_due(table: TableTimelines) -> dict[str, Any]:
    """The archive's horizon and size, and whether archival is due (``timeline.archiver``)."""
    snap = table.store.archive.snapshot()
    active = archiver.active_count(table, snap)
    return {
        "horizon": snap.horizon,
        "archived_instants": len(snap.timeline(TimelineKind.GLOBAL)),
        "active_instants": active,
        "archive_files": len(snap.manifest.files) if snap.manifest is not None else 0,
        "inline": table.options.get(cfg.ARCHIVE_INLINE),
        "due": active > table.options.get(cfg.ARCHIVE_MAX),
    }


def key_value(options: cfg.Options, name: str) -> Any:
    return options.get(cfg.REGISTRY[name])


def compaction_due(table: TableTimelines, reader: MetadataReader) -> dict[str, Any]:
    """Metadata file groups an inline compaction would fold after the next commit."""
    policy = LogPolicy.of(table.options)
    due: dict[str, int] = {}
    most = 0
    for name in sorted(reader.point.group_counts):
        listing = reader.listing(Partition(name))
        for piece in reader.slices(Partition(name)):
            most = max(most, len(piece.logs))
            if policy.due(piece, base_bytes(listing, piece)):
                due[name] = due.get(name, 0) + 1
    return {
        "inline": policy.inline,
        "max_log_files": policy.max_log_files,
        "max_log_bytes": policy.max_log_bytes,
        "log_ratio": policy.log_ratio,
        "small_base_bytes": policy.small_base_bytes,
        "hard_log_files": policy.hard_log_files,
        "most_log_files_in_a_group": most,
        "groups_due": due,
    }


def resize_due(table: TableTimelines, ri: dict[str, Any]) -> dict[str, Any]:
    """The record index's automatic resize: entries per group (bases) against the limit."""
    options = table.options
    per_group = options.get(meta_settings.RECORDS_PER_GROUP)
    limit = per_group * options.get(meta_settings.RESIZE_FACTOR)
    groups = max(1, ri["file_groups"])
    return {
        "auto": options.get(meta_settings.AUTO_RESIZE),
        "base_entries_per_group": ri["base_entries"] // groups,
        "resize_above_entries_per_group": int(limit),
        "due": bool(options.get(meta_settings.AUTO_RESIZE)) and ri["base_entries"] / groups > limit,
    }
