"""Operation metrics of one write (``metadata.commits.CommitMetrics``): exact counts from its
write statuses and the metadata it logged, and the milliseconds of each phase.

Phases, in order (:data:`PHASES`):

* ``prepare``: from the engine's start to the instant requested (input checks, prepare,
  de-duplicate, tag through the record index, route; on the Spark engine the stages Spark
  ran before the request);
* ``write``: the data files (the engine's rewrite tasks, made durable), and the record_index
  blocks of an insert of new keys only, written beside them (``writers.commit.ahead``);
* ``metadata``: the metadata table's log blocks (files, column_stats, record_index,
  secondary indexes);
* ``commit``: the conflict check and the completion under the table lock (waiting for the
  lock included).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from lakebraid.metadata.commits import CommitMetrics, WriteStatus
from lakebraid.metadata.writer import InstantChanges, WrittenLog

PHASES = ("prepare", "write", "metadata", "commit")


class PhaseClock:
    """Milliseconds per phase of one write, lap by lap (``time.perf_counter``)."""

    def __init__(self, started: float | None = None):
        self._last = time.perf_counter() if started is None else started
        self.ms: dict[str, int] = {}

    def lap(self, phase: str) -> None:
        """Close ``phase``: the time since the previous lap (or the start) is its own."""
        now = time.perf_counter()
        self.ms[phase] = self.ms.get(phase, 0) + round((now - self._last) * 1000)
        self._last = now


def index_entries(changes: InstantChanges) -> int:
    """Record-index entries a commit logs: upserts (inserted, moved keys) plus deletes."""
    upserts = changes.index_upserts
    return (0 if upserts is None else upserts.num_rows) + len(changes.index_deletes)


def metrics_of(
    operation: str,
    statuses: Sequence[WriteStatus],
    logs: Sequence[WrittenLog],
    entries: int,
    phases: dict[str, int],
) -> CommitMetrics:
    """The metrics of a write from its statuses (one per file group rewritten).

    A key an upsert moves to another partition reaches the rewrite as a delete in its old
    group and an insert in its new one (``writers.write.route.route``); a write other than
    ``delete`` deletes nothing else, so each of its deletes is one such move and the pair
    counts as one update. A ``delete`` inserts and updates nothing."""
    inserts = sum(s.inserts for s in statuses)
    updates = sum(s.updates for s in statuses)
    deletes = sum(s.deletes for s in statuses)
    moved = 0 if operation == "delete" else deletes
    return CommitMetrics(
        rows_inserted=inserts - moved,
        rows_updated=updates + moved,
        rows_deleted=deletes - moved,
        files_added=sum(1 for s in statuses if s.file_name is not None),
        files_removed=sum(len(s.replaced()) for s in statuses),
        bytes_written=sum(s.size for s in statuses if s.file_name is not None),
        metadata_bytes_written=sum(log.size for log in logs),
        index_entries_written=entries,
        phases_ms={p: phases[p] for p in PHASES if p in phases},
    )
