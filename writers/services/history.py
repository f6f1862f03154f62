"""A table's history (``lakebraid history``, ``WriteClient.history``), like Delta's ``DESCRIBE
HISTORY`` or Hudi's ``commits show``: one row per completed instant, newest first, as plain
dicts read from the instant bodies.

* Global timeline: every write (``commit``: its operation and ``CommitMetrics``, format.md
  section 6.1; ``metrics`` is None for commits written before metrics were recorded) and
  every table service (``rollback``, ``restore``, ``savepoint``, ``clean``: what it undid,
  kept or deleted).
* Metadata timeline: the services that live there only (``compaction``, ``reindex``,
  ``index``: the file groups compacted, the new group counts, the index built or dropped).

``state`` is ``completed``, or ``undone`` for a commit a later rollback or restore undid.
Nothing here writes; one listing of each timeline and one read per instant body.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lakebraid.metadata.commits import read_commit
from lakebraid.timeline.bodies import (
    CleanPlan,
    CompactionPlan,
    IndexPlan,
    ReindexPlan,
    RestorePlan,
    RollbackPlan,
    SavepointBody,
)
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.errors import WriteError

G, M = TimelineKind.GLOBAL, TimelineKind.METADATA
METADATA_SERVICES = (Action.COMPACTION, Action.REINDEX, Action.INDEX)


def history(table: TableTimelines, limit: int | None = None) -> list[dict[str, Any]]:
    """The completed instants of the table, newest completion first (at most ``limit``)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise WriteError(
            f"limit must be a positive whole number of instants, not {limit!r}",
            table=table.path,
        )
    found = [(i, G) for i in table.timeline(G).completed()]
    found += [(i, M) for i in table.timeline(M).completed() if i.action in METADATA_SERVICES]
    found.sort(key=lambda pair: (pair[0].completion_time or "", pair[0].time), reverse=True)
    if limit is not None:
        found = found[:limit]
    undone = table.visibility().undone
    return [_row(table, inst, kind, undone) for inst, kind in found]


def _row(
    table: TableTimelines, inst: Instant, kind: TimelineKind, undone: frozenset[str]
) -> dict[str, Any]:
    operation, metrics, details = _body(table, inst, kind)
    return {
        "time": inst.time,
        "completion_time": inst.completion_time,
        "timeline": kind.value,
        "action": inst.action.value,
        "operation": operation,
        "state": "undone" if inst.time in undone else "completed",
        "metrics": metrics,
        "details": details,
    }


def _body(
    table: TableTimelines, inst: Instant, kind: TimelineKind
) -> tuple[str, dict[str, Any] | None, dict[str, Any]]:
    """(operation, metrics, details) of one completed instant, from its body."""
    action, store = inst.action, table.store
    if action is Action.COMMIT:
        body = read_commit(table, inst)
        metrics = None if body.metrics is None else msgspec.to_builtins(body.metrics)
        return body.operation, metrics, {"file_groups": len(body.statuses)}
    if action is Action.ROLLBACK:
        rb = store.read_typed(kind, inst, RollbackPlan)
        files = {"data_files": len(rb.data_files), "metadata_logs": len(rb.logs)}
        target = {"target": rb.target, "target_action": rb.target_action.value}
        return "rollback", None, {**target, **files}
    if action is Action.RESTORE:
        rs = store.read_typed(kind, inst, RestorePlan)
        files = {"data_files": len(rs.data_files), "metadata_logs": len(rs.logs)}
        return "restore", None, {"target": rs.target, "undone": list(rs.undone), **files}
    if action is Action.SAVEPOINT:
        return "savepoint", None, {"target": store.read_typed(kind, inst, SavepointBody).target}
    if action is Action.CLEAN:
        cl = store.read_typed(kind, inst, CleanPlan)
        return (
            "clean",
            None,
            {
                "earliest_retained": cl.earliest_retained,
                "data_files": len(cl.data_files),
                "metadata_files": len(cl.metadata_files),
            },
        )
    return _metadata_service(table, inst)


def _metadata_service(
    table: TableTimelines, inst: Instant
) -> tuple[str, dict[str, Any] | None, dict[str, Any]]:
    store = table.store
    if inst.action is Action.COMPACTION:
        plan = store.read_typed(M, inst, CompactionPlan)
        folded = {i for times in plan.folded.values() for i in times}
        return "compaction", None, {"file_groups": len(plan.groups), "instants_folded": len(folded)}
    if inst.action is Action.REINDEX:
        plan = store.read_typed(M, inst, ReindexPlan)  # type: ignore[assignment]
        return "reindex", None, {"group_counts": dict(plan.group_counts)}  # type: ignore[attr-defined]
    index = store.read_typed(M, inst, IndexPlan)
    columns = [index.column] if index.kind == "secondary" else list(index.columns)
    return f"index {index.op}", None, {"kind": index.kind, "columns": columns}


# ---- text ------------------------------------------------------------------------------
COLUMNS = (
    "completed",
    "action",
    "operation",
    "state",
    "+rows",
    "~rows",
    "-rows",
    "+files",
    "-files",
    "bytes",
    "index",
    "ms",
    "details",
)


LEGEND = (
    "(+rows inserted, ~rows updated, -rows deleted; +files added, -files removed (replaced); "
    "bytes: data bytes written; index: record-index entries written; ms: the phases' total)"
)


def format_history(rows: list[dict[str, Any]], path: str) -> str:
    """A human table of :func:`history` rows (one line each; metrics blank when absent)."""
    cells = [COLUMNS, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS) - 1)]
    lines = [f"history of {path} ({len(rows)} instants, newest first)"]
    for line in cells:
        padded = [cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True)]
        lines.append("  ".join([*padded, line[-1]]).rstrip())
    lines.append(LEGEND)
    return "\n".join(lines)


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    m = row["metrics"]
    numbers = (
        ("", "", "", "", "", "", "", "")
        if m is None
        else (
            str(m["rows_inserted"]),
            str(m["rows_updated"]),
            str(m["rows_deleted"]),
            str(m["files_added"]),
            str(m["files_removed"]),
            human_bytes(m["bytes_written"]),
            str(m["index_entries_written"]),
            str(sum(m["phases_ms"].values())),
        )
    )
    details = " ".join(f"{k}={_text(v)}" for k, v in row["details"].items())
    if m is not None and m["phases_ms"]:
        details = " ".join(f"{k}={v}ms" for k, v in m["phases_ms"].items())
    action = row["action"] if row["timeline"] == "global" else f"{row['action']} (metadata)"
    return (
        row["completion_time"] or "-",
        action,
        row["operation"],
        row["state"],
        *numbers,
        details,
    )


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


def human_bytes(n: int) -> str:
    """``n`` bytes as B, KiB, MiB or GiB with one decimal."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
