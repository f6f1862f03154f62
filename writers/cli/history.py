"""``lakebraid history PATH`` and ``lakebraid show PATH``: what a table did, and what it is.

``history`` prints one row per completed instant, newest first (``WriteClient.history``:
operation, state and a write's metrics; what a service undid, kept or cleaned); ``show`` the
table's schema, partitions, files, rows, bytes on disk by part, record-index groups, indexes
and table services (``WriteClient.show``). Both take ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lakebraid.writers.client import WriteClient
from lakebraid.writers.services.history import format_history, human_bytes

HISTORY_HELP = "what each completed instant did, newest first (like DESCRIBE HISTORY)"
SHOW_HELP = "the table's schema, sizes, record index, indexes and table services"


def add_commands(sub: Any, path_help: str) -> None:
    """Register ``history`` and ``show`` on the CLI's subparsers (``--json`` is added with
    every command's)."""
    history = sub.add_parser("history", help=HISTORY_HELP, description=HISTORY_HELP)
    history.add_argument("path", help=path_help)
    history.add_argument(
        "--limit", type=int, metavar="N", help="only the N newest instants (N >= 1)"
    )
    history.set_defaults(run=cmd_history)
    show = sub.add_parser("show", help=SHOW_HELP, description=SHOW_HELP)
    show.add_argument("path", help=path_help)
    show.set_defaults(run=cmd_show)


def cmd_history(args: argparse.Namespace) -> int:
    client = WriteClient.open(args.path)
    rows = client.history(limit=args.limit)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"{client.path} has no completed instants yet (nothing was written to it)")
    else:
        print(format_history(rows, client.path))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    found = WriteClient.open(args.path).show()
    print(json.dumps(found, indent=2) if args.json else format_show(found))
    return 0


def format_show(found: dict[str, Any]) -> str:
    """The text of ``lakebraid show``."""
    return "\n".join(
        [
            *_table_lines(found),
            *_data_lines(found["data"]),
            *_disk_lines(found["bytes_on_disk"]),
            *_index_lines(found["record_index"], found["indexes"]),
            *_service_lines(found["services"]),
        ]
    )


def _table_lines(found: dict[str, Any]) -> list[str]:
    t = found["table"]
    columns = ", ".join(
        f"{f['name']} {f['type']}{'' if f['nullable'] else ' not null'}" for f in t["schema"]
    )
    return [
        f"table {t['name']} at {found['path']} ({t['table_type'].replace('_', '-')}, "
        f"format version {t['format_version']})",
        f"  record key {t['record_key']}, precombine {t['precombine_field'] or '-'}, "
        f"partitioned by {', '.join(t['partition_fields']) or '(none)'}, "
        f"record index scope {t['index_scope']}",
        f"  schema: {columns or '(none yet)'}",
        f"  created {t['created_at'] or '-'}, latest visible instant {t['latest_visible'] or '-'}",
        f"  options: {_pairs(t['options'])}",
    ]


def _rows_text(part: dict[str, Any]) -> str:
    """``N rows``; with merge-on-read logs, base rows and the logs' data rows (unmerged)."""
    if part["rows"] is not None:
        return f"{part['rows']:,} rows"
    if part["base_rows"] is None:
        return "? rows"
    return f"{part['base_rows']:,} base rows + {part['log_rows']:,} log rows (not merged)"


def _data_lines(data: dict[str, Any]) -> list[str]:
    lines = [
        f"data (metadata table): {data['partitions']} partitions, {data['files']} files, "
        f"{_rows_text(data)}, {human_bytes(data['bytes'])}"
    ]
    parts = list(data["by_partition"].items())
    for partition, p in parts[:10]:
        lines.append(
            f"  {partition or '(unpartitioned)'}: {p['files']} files, {_rows_text(p)}, "
            f"{human_bytes(p['bytes'])}"
        )
    if len(parts) > 10:
        lines.append(f"  ... {len(parts) - 10} more partitions (--json lists every one)")
    if data["rows"] is None and data["log_rows"]:
        lines.append(
            "  (log rows: data rows appended to merge-on-read logs since each group's base, "
            "updates and inserts; deletes not subtracted; a read or compaction merges them)"
        )
    return lines


def _disk_lines(disk: dict[str, Any]) -> list[str]:
    total = disk["total"]
    lines = [f"bytes on disk (listing): {human_bytes(total['bytes'])} in {total['files']} files"]
    for part, p in disk["by_part"].items():
        lines.append(f"  {part}: {human_bytes(p['bytes'])} in {p['files']} files")
    return lines


def _index_lines(ri: dict[str, Any], indexes: dict[str, Any]) -> list[str]:
    lines = [
        f"record index: {ri['file_groups']} file groups, {ri['base_entries']:,} entries in "
        f"bases (footers) + {ri['log_records']:,} log records since (block headers, not merged)"
    ]
    for g in ri["groups"][:16]:
        lines.append(
            f"  {g['file_group']}: {g['base_entries']:,} base entries, {g['log_files']} log "
            f"files ({human_bytes(g['log_bytes'])}, {g['log_records']:,} records)"
        )
    if len(ri["groups"]) > 16:
        lines.append(f"  ... {len(ri['groups']) - 16} more groups (--json lists every one)")
    lines.append(f"secondary indexes: {_pairs(indexes['secondary'], 'built ')}")
    lines.append(f"built column statistics: {_pairs(indexes['column_stats'], 'built ')}")
    return lines


def _pending(instant: dict[str, Any]) -> str:
    """One pending instant of ``show``; a metadata compaction that can never complete says
    what overtook it (``metadata.compaction``: left pending, never read)."""
    state = instant["state"]
    if instant.get("abandoned_by"):
        state += f", abandoned: {instant['abandoned_by']} completed after it began"
    return f"{instant['time']} {instant['action']} ({state})"


def _service_lines(services: dict[str, Any]) -> list[str]:
    last = ", ".join(
        f"{name} {done['completed']}" if done else f"{name} never"
        for name, done in services["last"].items()
    )
    due = services["next"]
    compaction, resize = due["compaction"], due["resize"]
    groups = sum(compaction["groups_due"].values())
    pending = ", ".join(map(_pending, services["pending"]))
    return [
        f"table services: last {last}",
        f"  savepointed commits: {', '.join(services['savepoints']) or 'none'}",
        f"  pending instants: {pending or 'none'}",
        f"  next compaction: {groups} metadata file groups due (inline "
        f"{'on' if compaction['inline'] else 'off'}: at {compaction['max_log_files']} log files "
        f"or {human_bytes(compaction['max_log_bytes'])} once logs reach "
        f"{compaction['log_ratio']:g} of a base of "
        f"{human_bytes(compaction['small_base_bytes'])} or more, or at "
        f"{compaction['hard_log_files']} log "
        f"files; fullest group has "
        f"{compaction['most_log_files_in_a_group']})",
        f"  next record-index resize: {'due' if resize['due'] else 'not due'} "
        f"({resize['base_entries_per_group']:,} base entries per group, resizes above "
        f"{resize['resize_above_entries_per_group']:,}; auto {'on' if resize['auto'] else 'off'})",
        f"  clean: {due['clean']['commits_since_last_clean']} commits since the last clean",
        f"  archive: {_archive_text(due['archive'])}",
        f"  settings: {_pairs(services['settings'])}",
    ]


def _archive_text(archive: dict[str, Any]) -> str:
    held = (
        f"{archive['archived_instants']} instants up to {archive['horizon']} in "
        f"{archive['archive_files']} files"
        if archive["horizon"]
        else "empty"
    )
    state = "due" if archive["due"] else "not due"
    return f"{held}; {archive['active_instants']} active global instants ({state})"


def _pairs(mapping: dict[str, Any], prefix: str = "") -> str:
    return ", ".join(f"{k}={prefix}{v}" for k, v in mapping.items()) or "none"
