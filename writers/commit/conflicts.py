"""The conflict check of a commit, as a pure function: one rule per function, each deciding
from plain values (the committing write's groups and keys, and what other instants did since
its read point). :class:`writers.commit.transaction.Transaction` gathers those values under
the table lock and acts on the verdict.

Rules, in the order they are judged:

1. :func:`undone_by_rollback` -- a rollback requested at or after this write began targets it
   (another writer's recovery judged it dead): the write must not complete.
2. :func:`undone_by_restore` -- a restore requested at or after this write began returns the
   table to an instant before it: the write must not complete.
3. :func:`overlapping_groups` -- a visible commit completed since the read point (any
   visible commit when the write's reads saw none: :attr:`Mine.since`) rewrote one of this
   write's file groups (copy-on-write would lose its rows).
4. :func:`overlapping_keys` -- such a commit wrote the index entry of one of this write's
   keys (two writers inserting one new key into different groups).
5. :func:`resharded_during` -- a reindex of the record index (metadata timeline) completed
   after this write chose the layout of its index log files, or is running (its writer's
   heartbeat is live): the reindex did not read this write's entries and they are in the old
   layout, so the write must not complete (retry it once the reindex is done).
6. :func:`indexed_during` -- an index build or drop (``index`` on the metadata timeline: a
   secondary index or column statistics) that is running or completed and that this write did
   not see when it chose its layout: the write did not keep that index's entries or
   statistics (``index.secondary_build``, ``index.column_stats_build``), so it must not
   complete (retry it: the retry keeps them).

7. :func:`based_beside` -- this write gave a record-index file group that held no file a
   *commit base* (``metadata.writer``), and by the time it commits another instant has put a
   file in that group: readers pick one base per group, so the two could not both count
   (retry it: the group is no longer empty, the retry writes a log).

8. :func:`undid_my_reads` -- a rollback or restore that had not completed at this write's
   read point (pending, or completed since) undoes a commit the write's reads saw: the write
   built its files on that commit's (rolling back a commit the write's reads saw, its rows
   would come back through the write's files; a compaction would fold them into a base), so
   it must not complete (retry it on the table as the undo leaves it). A rollback of a commit
   that never completed (a dead writer's) undoes nothing the write saw.

Anything else completed in between (a clean, a compaction, a savepoint, a commit on disjoint
groups and keys) is no conflict. Keys are asked for only when a commit passed rule 3 (reading
another commit's keys costs a read of its record-index logs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from lakebraid.timeline.instant import Action

Group = tuple[str, str]  # (partition, file id)


class Mine(msgspec.Struct, frozen=True, kw_only=True):
    """The committing write: its instant, its read point and the file groups it rewrote."""

    time: str
    read_at: str | None  # completion time of the latest instant its reads saw
    groups: frozenset[Group]
    reindexes_seen: frozenset[str] = frozenset()  # completed reindexes when it wrote its logs
    builds_seen: frozenset[str] = frozenset()  # running index builds/drops it kept entries for
    base_neighbours: frozenset[str] = frozenset()  # others' instants in its commit-base groups

    @property
    def since(self) -> str:
        """Commits completed after this are news to the write: after its read point, or
        every one when its reads saw none (an empty table: a commit completed between those
        reads and this write's instant is news too; the write's own time would miss it)."""
        return "" if self.read_at is None else self.read_at


class Other(msgspec.Struct, frozen=True, kw_only=True):
    """Another instant on the global timeline (reindexes: the metadata timeline), as the rules
    need it."""

    time: str
    action: Action
    completion_time: str | None = None  # None: not completed
    visible: bool = False
    groups: frozenset[Group] = frozenset()  # commits: the file groups they rewrote
    target: str | None = None  # rollbacks and restores: their target (from the requested plan)
    target_completed: str | None = None  # rollbacks: their target's completion time, if any
    alive: bool = False  # pending instants: their writer's heartbeat is live


class Verdict(msgspec.Struct, frozen=True):
    undone_by: str | None = None  # a rollback or restore that undoes this write
    conflicts: tuple[str, ...] = ()  # commits that overlap this write

    @property
    def ok(self) -> bool:
        return self.undone_by is None and not self.conflicts


def undone_by_rollback(mine: Mine, other: Other) -> bool:
    return other.action is Action.ROLLBACK and other.time >= mine.time and other.target == mine.time


def undone_by_restore(mine: Mine, other: Other) -> bool:
    return (
        other.action is Action.RESTORE
        and other.time >= mine.time
        and other.target is not None
        and other.target < mine.time
    )


def undid_my_reads(mine: Mine, other: Other) -> bool:
    if other.action not in (Action.ROLLBACK, Action.RESTORE) or mine.read_at is None:
        return False
    if other.completion_time is not None and other.completion_time <= mine.read_at:
        return False  # done before the write's reads: they saw the table as it left it
    if other.action is Action.RESTORE:
        return True  # it undoes every commit after its target: the reads saw the table
    return other.target_completed is not None and other.target_completed <= mine.read_at


def _completed_since(mine: Mine, other: Other) -> bool:
    done = other.completion_time
    return (
        other.action is Action.COMMIT and other.visible and done is not None and done > mine.since
    )


def overlapping_groups(mine: Mine, other: Other) -> bool:
    return _completed_since(mine, other) and bool(other.groups & mine.groups)


def resharded_during(mine: Mine, other: Other) -> bool:
    if other.action is not Action.REINDEX:
        return False
    if other.completion_time is None:
        return other.alive
    return other.time not in mine.reindexes_seen


def indexed_during(mine: Mine, other: Other) -> bool:
    if other.action is not Action.INDEX:
        return False
    if other.completion_time is None and not other.alive:
        return False  # a dead build never completes
    return other.time not in mine.reindexes_seen and other.time not in mine.builds_seen


def based_beside(mine: Mine) -> bool:
    return bool(mine.base_neighbours)


def overlapping_keys(mine_keys: frozenset[str], their_keys: frozenset[str]) -> bool:
    return bool(mine_keys & their_keys)


def check(
    mine: Mine,
    others: Sequence[Other],
    my_keys: Callable[[], frozenset[str]],
    their_keys: Callable[[str], frozenset[str]],
) -> Verdict:
    """The verdict on ``mine`` against ``others`` (see the module doc for the rules)."""
    for other in others:
        if undone_by_rollback(mine, other) or undone_by_restore(mine, other):
            return Verdict(undone_by=other.time)
    found = [
        other.time
        for other in others
        if resharded_during(mine, other)
        or indexed_during(mine, other)
        or undid_my_reads(mine, other)
    ]
    if based_beside(mine):
        found.extend(sorted(mine.base_neighbours))
    keys: frozenset[str] | None = None
    for other in others:
        if not _completed_since(mine, other):
            continue
        if overlapping_groups(mine, other):
            found.append(other.time)
            continue
        keys = my_keys() if keys is None else keys
        if overlapping_keys(keys, their_keys(other.time)):
            found.append(other.time)
    return Verdict(conflicts=tuple(found))
