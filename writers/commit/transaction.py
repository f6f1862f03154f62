"""The commit protocol of one write, each stage its own step.

::

    lock:   t = next instant time; requested on global, data, metadata (body: CommitPlan)
    write data files (tasks; each creates its marker first) -> write statuses
            (an insert of new keys only: its record_index blocks beside them, writers.commit.ahead)
    inflight on data (body: CommitMetadata), metadata, global
    metadata log blocks at instant t (files, column_stats, record_index; secondary_index for
            the indexes visible or being built at the layout's read point, statistics of the
            columns built or being built then too: index.column_stats_build.stats_maintained)
    lock:   completed on data, metadata, then global (THE COMMIT POINT), one completion time

Instant bodies are msgspec JSON, version 1. The completed data and global files hold the
:class:`CommitMetadata`: the write statuses (without key lists), the metadata log files
written and the table schema after this commit, so rollback and readers need nothing else,
and the operation metrics (``writers.commit.metrics``: rows, files, bytes, index entries,
milliseconds per phase).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence

import msgspec

from lakebraid.index.column_stats_build import stats_maintained
from lakebraid.index.record_index import entries_of, index_keys, logged_keys
from lakebraid.index.scope import is_scoped
from lakebraid.index.secondary import entry_changes, write_logs
from lakebraid.index.secondary_build import maintained
from lakebraid.metadata.commits import (
    CommitMetadata,
    CommitPlan,
    MetadataLogs,
    WriteStatus,
    data_groups,
    read_commit,
)
from lakebraid.metadata.records import ColumnStatsRecord, Partition
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.metadata.writer import InstantChanges, WrittenLog
from lakebraid.timeline import progress
from lakebraid.timeline.bodies import encode_body
from lakebraid.timeline.errors import (
    IllegalTransitionError,
    InstantExistsError,
    RetryableError,
    StateUnknownError,
)
from lakebraid.timeline.heartbeat import Heartbeat
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.owed import at_once, settle
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec
from lakebraid.writers.commit import conflicts
from lakebraid.writers.commit.ahead import IndexAhead, IndexByTasks, agree, rebased
from lakebraid.writers.commit.metrics import PhaseClock, index_entries, metrics_of
from lakebraid.writers.commit.undos import undo_instants
from lakebraid.writers.errors import ConflictDetected, WriteConflictError

G, D, M = TimelineKind.GLOBAL, TimelineKind.DATA, TimelineKind.METADATA


def changes_of(
    statuses: Sequence[WriteStatus],
    columns: Sequence[str],
    recorded: Collection[str] | None = None,
    *,
    scoped: bool = False,
    index: bool = True,
) -> InstantChanges:
    """The metadata changes of a set of write statuses: files, column stats (of the
    ``recorded`` columns; None: all) and, unless ``index`` is False (written ahead:
    ``writers.commit.ahead``), the record index entries (``index.record_index.entries_of``).
    A replaced file's statistics are removed for every column of ``columns`` (whatever an
    older limit recorded)."""
    added: dict[str, dict[str, int]] = {}
    deleted: dict[str, list[str]] = {}
    stats: list[ColumnStatsRecord] = []
    for s in statuses:
        if s.file_name is not None:
            added.setdefault(s.partition, {})[s.file_name] = s.size
            stats.extend(
                ColumnStatsRecord(
                    c.column,
                    s.partition,
                    s.file_name,
                    c.min_value,
                    c.max_value,
                    c.null_count,
                    c.value_count,
                    c.total_size,
                )
                for c in s.stats
                if recorded is None or c.column in recorded
            )
        for old in s.replaced():
            deleted.setdefault(s.partition, []).append(old)
            stats.extend(ColumnStatsRecord.tombstone(c, s.partition, old) for c in columns)
    upserts, removed = entries_of(statuses, scoped) if index else (None, ())  # scoped: by partition
    return InstantChanges(
        files_added=added,
        files_deleted=deleted,
        column_stats=stats,
        index_upserts=upserts,
        index_deletes=removed,
    )


class Transaction:
    """One write on the three timelines. Use as: ``begin()``, write files, ``commit()``."""

    def __init__(
        self,
        table: TableTimelines,
        metadata: MetadataTable,
        operation: str,
        read_at: str | None = None,
        clock: PhaseClock | None = None,
    ):
        """``read_at``: the latest completion the write's reads saw; commits completed after
        it are checked for conflicts (the write's plan may predate them). ``clock``: times
        the phases (``writers.commit.metrics``) from the engine's start."""
        self.clock = clock or PhaseClock()
        self.table = table
        self.metadata = metadata
        self.operation = operation
        self.read_at = read_at
        self.time: str | None = None
        self._heartbeat: Heartbeat | None = None
        self._bodies: dict[str, CommitMetadata] = {}
        self.unknown = False  # the commit point's write failed: it may have completed

    def begin(self) -> str:
        table = self.table
        plan = encode_body(CommitPlan(operation=self.operation))
        with table.lock:
            time = table.next_time()
            self._heartbeat = table.heartbeat(time).start()
            with at_once():  # durable before anything of the write: recovery's key
                table.store.request(G, time, Action.COMMIT, plan)
            table.store.request(D, time, Action.COMMIT, plan)  # owed to the write's scope
            table.store.request(M, time, Action.DELTACOMMIT, plan)
        self.time = time
        self.clock.lap("prepare")
        return time

    def commit(
        self,
        statuses: Sequence[WriteStatus],
        schema: Sequence[FieldSpec],
        ahead: IndexAhead | IndexByTasks | None = None,
    ) -> str:
        """Inflight with the statuses, metadata log blocks, then complete (the commit point).
        ``ahead``: the record-index blocks written beside the data files (``commit.ahead``),
        checked against the statuses, or by the engine's tasks from them; the rest is
        written in the layout they were."""
        assert self.time is not None, "begin() first"
        table, time = self.table, self.time
        layout, changes, ahead = self._changes(statuses, schema, ahead)
        summary = [msgspec.structs.replace(s, keys_added=b"", keys_removed=b"") for s in statuses]
        body = CommitMetadata(operation=self.operation, statuses=summary, schema=list(schema))
        table.store.start(D, time, Action.COMMIT, encode_body(body))
        table.store.start(M, time, Action.DELTACOMMIT)
        table.store.start(G, time, Action.COMMIT)
        with progress.task("write metadata log blocks"):
            logs = self.metadata.write(time, changes, layout)
            secondary, builds = self._secondary_logs(statuses, layout)
        if isinstance(ahead, IndexAhead):
            changes = dataclasses.replace(changes, index_upserts=ahead.upserts)
        my_keys = self._my_keys(changes, ahead)
        if ahead is not None:
            logs = ahead.logs + logs
        self.clock.lap("metadata")
        with table.lock:
            verdict = self._verdict(
                data_groups(statuses),
                my_keys,
                layout.bases,
                builds,
                _base_groups(logs),
            )
            self._refuse(verdict)
            self.clock.lap("commit")
            logs = logs + secondary
            entries = index_entries(changes)
            entries += ahead.entries if isinstance(ahead, IndexByTasks) else 0
            metrics = metrics_of(self.operation, statuses, logs, entries, self.clock.ms)
            done = encode_body(msgspec.structs.replace(body, logs=logs, metrics=metrics))
            completion = table.next_time()
            table.store.complete(D, time, Action.COMMIT, done, completion_time=completion)
            table.store.complete(
                M, time, Action.DELTACOMMIT, encode_body(MetadataLogs(logs=logs)), completion
            )
            self._decide(done, completion)
        try:
            self.close()
        except Exception:  # committed: a heartbeat file left of a completed instant is inert
            pass
        return time

    def _changes(
        self,
        statuses: Sequence[WriteStatus],
        schema: Sequence[FieldSpec],
        ahead: IndexAhead | IndexByTasks | None,
    ) -> tuple[ReadPoint, InstantChanges, IndexAhead | IndexByTasks | None]:
        """The read point whose layout all of the write's logs take (and whose rewrites the
        conflict check saw), the metadata changes of its statuses, and the blocks written
        ahead, checked against the statuses and rebased if need be (their entries are then
        not taken from the statuses)."""
        assert self.time is not None
        if isinstance(ahead, IndexAhead):
            agree(ahead, statuses, self.table.path, self.time)
            ahead = rebased(self.metadata, ahead, self.time)  # no base beside another's file
        layout = self.metadata.read_point() if ahead is None else ahead.point
        changes = changes_of(
            statuses,
            [f.name for f in schema],
            stats_maintained(self.metadata, layout, schema),
            scoped=is_scoped(self.table.config),
            index=ahead is None,
        )
        return layout, changes, ahead

    def _my_keys(
        self, changes: InstantChanges, ahead: IndexAhead | IndexByTasks | None
    ) -> Callable[[], frozenset[str]]:
        """The keys whose entries this write changes, for conflict rule 4 (called only when
        a commit since the read point touched the same file groups): those in ``changes``,
        or those the engine's tasks logged, read back from their files (``changes`` then
        holds no entry)."""
        if not isinstance(ahead, IndexByTasks):
            return lambda: frozenset(index_keys(changes))
        folder = self.table.layout.metadata_partition_dir(str(Partition.RECORD_INDEX))
        logs = ahead.logs
        return lambda: frozenset(logged_keys(self.table.fs, folder, logs))

    def _decide(self, done: bytes, completion: str) -> None:
        """Write the global completion, the commit point. Any failure but one known to come
        before the decision (a lost lock, a transition refused) leaves the outcome unknown:
        :class:`StateUnknownError`, and ``unknown`` is set so nothing rolls the write back."""
        table, time = self.table, self.time
        assert time is not None
        settle()  # what this write owes made durable before the commit point names it
        try:
            table.store.complete(G, time, Action.COMMIT, done, completion_time=completion)
        except BaseException as exc:
            if isinstance(exc, RetryableError) or (
                isinstance(exc, IllegalTransitionError) and not isinstance(exc, InstantExistsError)
            ):
                raise  # refused before the decision: nothing of it completed
            self.unknown = True
            if isinstance(exc, StateUnknownError) or not isinstance(exc, Exception):
                raise
            raise StateUnknownError(
                f"writing the commit point of {time} failed ({type(exc).__name__}: {exc}); "
                "whether it committed is unknown: `lakebraid timeline PATH` shows it; nothing "
                "was undone (the next writer's recovery rolls it back if it did not commit)",
                table=table.path,
                instant=time,
            ) from exc

    def _refuse(self, verdict: conflicts.Verdict) -> None:
        """Raise if the conflict rules say this write may not complete."""
        table, time = self.table, self.time
        if verdict.undone_by is not None:
            raise WriteConflictError(
                f"write {time} was judged dead (its heartbeat expired) and rolled back by "
                "another writer's recovery; nothing of it is visible: retry it, and raise "
                "heartbeat.expiry.ms if writes stall this long",
                table=table.path,
                instant=time,
            )
        if verdict.conflicts:
            others = list(verdict.conflicts)
            raise ConflictDetected(
                f"instants {others} got in the way of {time}: commits completed since it "
                "started that touched the same file groups or keys, a reindex of the record "
                "index, or a rollback or restore of a commit its reads saw",
                others=others,
                table=table.path,
                instant=time,  # type: ignore[arg-type]
            )

    def _secondary_logs(
        self, statuses: Sequence[WriteStatus], layout: ReadPoint
    ) -> tuple[list[WrittenLog], set[str]]:
        """The secondary-index log files of this write (for the indexes visible or being
        built in ``layout``), and the running index builds it saw."""
        table = self.table
        indexed, n, builds = maintained(self.metadata, layout)
        if not indexed:
            return [], builds
        key, scoped = table.config.record_key, is_scoped(table.config)
        added, gone = entry_changes(table.fs, table.layout, statuses, indexed, key, scoped=scoped)
        assert self.time is not None
        return write_logs(table.fs, table.layout, self.time, added, gone, n), builds

    def _verdict(
        self,
        groups: set[tuple[str, str]],
        my_keys: Callable[[], frozenset[str]],
        reindexes_seen: Sequence[str],
        builds_seen: set[str],
        base_groups: frozenset[str] = frozenset(),
    ) -> conflicts.Verdict:
        """Gather what the conflict rules need (``writers.commit.conflicts``) and judge. Under the
        table lock: commits completed since the read point, rollbacks and restores requested
        since this write began."""
        table, time = self.table, self.time
        assert time is not None
        mine = conflicts.Mine(
            time=time,
            read_at=self.read_at,
            groups=frozenset(groups),
            reindexes_seen=frozenset(reindexes_seen),
            builds_seen=frozenset(builds_seen),
            base_neighbours=self._neighbours(base_groups),
        )
        glob = table.timeline(G)
        others = undo_instants(table, glob, time, mine.since)
        undone = table.visibility(global_timeline=glob).undone
        others.extend(
            self._commit_of(inst)
            for inst in glob.completed_after(mine.since)
            if inst.action is Action.COMMIT and inst.time not in undone
        )
        others.extend(
            conflicts.Other(
                time=i.time, action=i.action, completion_time=i.completion_time, alive=running
            )
            for i, running in self.metadata.rewrites()
        )
        return conflicts.check(mine, others, my_keys, self._keys_of)

    def _neighbours(self, base_groups: frozenset[str]) -> frozenset[str]:
        """Other instants' files now in the record-index groups this write gave a commit
        base (conflict rule 7; ``MetadataTable.base_neighbours``)."""
        return self.metadata.base_neighbours(self.time, base_groups)

    def _commit_of(self, inst: Instant) -> conflicts.Other:
        body = read_commit(self.table, inst)
        self._bodies[inst.time] = body
        return conflicts.Other(
            time=inst.time,
            action=inst.action,
            completion_time=inst.completion_time,
            visible=True,
            groups=frozenset(data_groups(body.statuses)),
        )

    def _keys_of(self, time: str) -> frozenset[str]:
        folder = self.table.layout.metadata_partition_dir("record_index")
        return frozenset(logged_keys(self.table.fs, folder, self._bodies[time].logs))

    def close(self, *, failed: bool = False) -> None:
        """Stop the heartbeat; after a failure its file stays, expires, and recovery rolls
        the instant back."""
        if self._heartbeat is not None:
            self._heartbeat.stop(remove=not failed)
            self._heartbeat = None


def _base_groups(logs: Sequence[WrittenLog]) -> frozenset[str]:
    """The record-index file groups a write gave a commit base (``metadata.writer``)."""
    return frozenset(
        log.file_group
        for log in logs
        if log.partition == str(Partition.RECORD_INDEX) and log.name.endswith(".parquet")
    )
