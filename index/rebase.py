"""Undo across a reindex: corrected record-index bases.

A reindex folds every instant visible at its snapshot into full bases of a new layout, so
that layout has no older base to fall back to when one of those instants is undone. A
rollback or restore that undoes such an instant therefore writes, for each reindex that
folded one, corrected bases ``<group>_<b>.parquet`` at a fresh time ``b``: the reindex's rows
of every key the undone instants did not touch, and for the keys they touched (read from
their record-index log files, in whatever layout they were written) the entries as of the
reindex's snapshot without them, read in the layout before the reindex. The footer folds
the reindex's instants minus the undone ones. The undo's body maps the reindex to ``b``
(``timeline.bodies.RollbackBody.rebased``); from the undo's completion on, read points rank
the corrected bases as the reindex itself (``metadata.slices``), so reads as of every point
since the reindex stay exact.

Order of events: :func:`plan_rebase` runs under the table lock with the undo's plan and
refuses while a reindex runs; :func:`write_rebased` runs after the undo is inflight and
before it completes. A reindex that requested before the undo completed never completes
(``index.reindex``), so no reindex ever folds an instant undone behind its back.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.column_stats_rebase import rebase_column_stats
from lakebraid.index.errors import IndexLayerError, ReindexRunningError
from lakebraid.index.lookup import lookup
from lakebraid.index.secondary_rebase import rebase_secondary
from lakebraid.index.undo_points import (
    correction,
    every_key,
    evidence_cleaned,
    touched_keys,
    write_corrected_bases,
)
from lakebraid.metadata.arrow_records import KEY, SCHEMAS
from lakebraid.metadata.basefile import read_base
from lakebraid.metadata.records import Partition
from lakebraid.metadata.table import REWRITES, MetadataTable
from lakebraid.timeline.bodies import IndexPlan
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines

INDEX = Partition.RECORD_INDEX


def folding_rewrites(table: TableTimelines, targets: Sequence[Instant]) -> list[Instant]:
    """The completed rewrites (reindexes, index builds) that folded a completed target (each
    folds every instant completed before it was requested), oldest first."""
    done = [t.completion_time for t in targets if t.completion_time is not None]
    if not done:
        return []
    first = min(done)
    return [
        i
        for i in table.timeline(TimelineKind.METADATA).completed()
        if i.action in REWRITES and i.time > first
    ]


def plan_rebase(table: TableTimelines, targets: Sequence[Instant], verb: str) -> dict[str, str]:
    """Call under the table lock: for each reindex that folded a target, a fresh time for
    its corrected bases. Refuses while a reindex is running if a target is completed (the
    reindex folds it; a pending target is never folded)."""
    if all(t.completion_time is None for t in targets):
        return {}
    running = [
        i.time
        for i in table.timeline(TimelineKind.METADATA)
        if i.action in REWRITES and i.is_pending and table.is_alive(i.time)
    ]
    if running:
        raise ReindexRunningError(
            f"cannot {verb} while {running[0]} (a reindex or index build) is running (it "
            "folds every visible commit into new bases); wait for it to finish, then retry",
            table=table.path,
            instant=running[0],
        )
    return {r.time: table.next_time() for r in folding_rewrites(table, targets)}


def write_rebased(
    metadata_table: MetadataTable, rebased: dict[str, str], undone: Collection[str]
) -> None:
    """Write the corrected bases of every reindex in ``rebased`` (oldest first), for an
    undo of the instants ``undone``. Re-entrant: rewriting gives the same files."""
    if not rebased:
        return
    undone = frozenset(undone)
    cleaned = evidence_cleaned(metadata_table.table, undone)
    # the keys the undone instants touched, from their logs; every key, per rewrite, when a
    # clean may have deleted those logs
    keys = pa.array([], pa.string()) if cleaned else touched_keys(metadata_table, undone)
    mine: dict[str, str] = {}  # corrections already written by this undo
    meta = metadata_table.table.timeline(TimelineKind.METADATA)
    for rewrite, base in sorted(rebased.items()):
        inst = meta.get(rewrite)
        if inst is None or inst.completion_time is None:
            raise IndexLayerError(
                f"{rewrite} is not a completed reindex or index build; its bases cannot be "
                "corrected",
                table=metadata_table.table.path,
                instant=rewrite,
            )
        if cleaned:
            keys = every_key(metadata_table, inst, undone, mine)
        if inst.action is Action.INDEX:
            plan = metadata_table.table.store.read_typed(TimelineKind.METADATA, inst, IndexPlan)
            if plan.kind == "column_stats":
                rebase_column_stats(metadata_table, inst, plan, base, undone, mine)
            else:
                rebase_secondary(metadata_table, inst, base, undone, keys, mine)
        else:
            _rebase(metadata_table, inst, base, undone, keys, mine)
        mine[base] = rewrite


def _rebase(
    metadata_table: MetadataTable,
    reindex: Instant,
    base: str,
    undone: frozenset[str],
    keys: pa.Array,
    mine: dict[str, str],
) -> None:
    """The corrected bases of one reindex: its rows less the touched keys, plus their
    entries as of its request without the undone instants (the layout before it)."""
    fix = correction(metadata_table, reindex, undone, mine)
    schema = SCHEMAS[INDEX]
    prior = lookup(fix.before, keys, unique=True).select(schema.names).cast(schema)
    key_groups = pa.array(fix.at.point.index_groups(keys))
    prior_groups = pa.array(fix.at.point.index_groups(prior.column(KEY)))

    def correct(index: int, path: str) -> pa.Table:
        rows = read_base(metadata_table.fs, path).select(schema.names).cast(schema)
        gone = keys.filter(pc.equal(key_groups, index))
        rows = rows.filter(pc.invert(pc.is_in(rows.column(KEY), value_set=gone)))
        return pa.concat_tables([rows, prior.filter(pc.equal(prior_groups, index))])

    write_corrected_bases(metadata_table, INDEX, fix.at, base, undone, correct)
