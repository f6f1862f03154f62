"""The commit protocol of one write (design section 3), each stage its own step.

::

    lock:   t = next instant time; requested on global, data, metadata (body: CommitPlan)
    write data files (tasks; each creates its marker first) -> write statuses
    inflight on data (body: CommitMetadata), metadata, global
    metadata log blocks at instant t (files, column_stats, record_index)
    lock:   completed on data, metadata, then global (THE COMMIT POINT), one completion time

Instant bodies are msgspec JSON, version 1. The completed data and global files hold the
:class:`CommitMetadata`: the write statuses (without key lists), the metadata log files
written and the table schema after this commit, so rollback and readers need nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.record_index import index_keys, logged_keys
from lakebraid.metadata.commits import (
    CommitMetadata,
    CommitPlan,
    WriteStatus,
    read_commit,
    unpack_keys,
)
from lakebraid.metadata.records import ColumnStatsRecord
from lakebraid.metadata.table import MetadataTable
from lakebraid.metadata.writer import InstantChanges
from lakebraid.timeline.bodies import RestoreBody, decode_body, encode_body
from lakebraid.timeline.heartbeat import Heartbeat
from lakebraid.timeline.instant import Action, Instant, State
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec
from lakebraid.writers import conflicts
from lakebraid.writers.errors import ConflictDetected, WriteConflictError

G, D, M = TimelineKind.GLOBAL, TimelineKind.DATA, TimelineKind.METADATA
BODY_VERSION = 1


def changes_of(statuses: Sequence[WriteStatus], columns: Sequence[str]) -> InstantChanges:
    """The metadata changes of a set of write statuses (files, column stats, index)."""
    added: dict[str, dict[str, int]] = {}
    deleted: dict[str, list[str]] = {}
    stats: list[ColumnStatsRecord] = []
    keys: list[pa.Array] = []
    gone: list[pa.Array] = []
    counts: list[int] = []
    parts: list[str] = []
    ids: list[str] = []
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
            )
            new = unpack_keys(s.keys_added)
            keys.append(new)
            counts.append(len(new))
            parts.append(s.partition)
            ids.append(s.file_id)
        if s.old_file is not None:
            deleted.setdefault(s.partition, []).append(s.old_file)
            stats.extend(ColumnStatsRecord.tombstone(c, s.partition, s.old_file) for c in columns)
        gone.append(unpack_keys(s.keys_removed))
    # each status's partition and file id once, as dictionaries (no string per key)
    owner = pa.array(np.repeat(np.arange(len(counts), dtype=np.int32), counts))
    upserts = pa.table(
        {
            "key": _concat(keys),
            "partition": pa.DictionaryArray.from_arrays(owner, pa.array(parts, pa.string())),
            "file_id": pa.DictionaryArray.from_arrays(owner, pa.array(ids, pa.string())),
        }
    )
    removed = _concat(gone)
    if len(removed) and upserts.num_rows:
        removed = removed.filter(pc.invert(pc.is_in(removed, value_set=upserts.column("key"))))
    return InstantChanges(
        files_added=added,
        files_deleted=deleted,
        column_stats=stats,
        index_upserts=upserts,
        index_deletes=pc.unique(removed),  # a key moved between groups is an upsert only
    )


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())


def data_groups(statuses: Sequence[WriteStatus]) -> set[tuple[str, str]]:
    """The data file groups a commit rewrote, as (partition, file id)."""
    return {(s.partition, s.file_id) for s in statuses}


class Transaction:
    """One write on the three timelines. Use as: ``begin()``, write files, ``commit()``."""

    def __init__(
        self,
        table: TableTimelines,
        metadata: MetadataTable,
        operation: str,
        read_at: str | None = None,
    ):
        """``read_at``: the latest completion the write's reads saw; commits completed after
        it are checked for conflicts (the write's plan may predate them)."""
        self.table = table
        self.metadata = metadata
        self.operation = operation
        self.read_at = read_at
        self.time: str | None = None
        self._heartbeat: Heartbeat | None = None
        self._bodies: dict[str, CommitMetadata] = {}

    def begin(self) -> str:
        table = self.table
        plan = encode_body(CommitPlan(operation=self.operation))
        with table.lock:
            time = table.next_time()
            self._heartbeat = table.heartbeat(time).start()
            table.store.request(G, time, Action.COMMIT, plan)
            table.store.request(D, time, Action.COMMIT, plan)
            table.store.request(M, time, Action.DELTACOMMIT, plan)
        self.time = time
        return time

    def commit(self, statuses: Sequence[WriteStatus], schema: Sequence[FieldSpec]) -> str:
        """Inflight with the statuses, metadata log blocks, then complete (the commit point)."""
        assert self.time is not None, "begin() first"
        table, time = self.table, self.time
        columns = [f.name for f in schema]
        changes = changes_of(statuses, columns)
        summary = [msgspec.structs.replace(s, keys_added=b"", keys_removed=b"") for s in statuses]
        body = CommitMetadata(operation=self.operation, statuses=summary, schema=list(schema))
        table.store.start(D, time, Action.COMMIT, encode_body(body))
        table.store.start(M, time, Action.DELTACOMMIT)
        table.store.start(G, time, Action.COMMIT)
        logs = self.metadata.write(time, changes)
        done = encode_body(msgspec.structs.replace(body, logs=logs))
        with table.lock:
            verdict = self._verdict(data_groups(statuses), lambda: frozenset(index_keys(changes)))
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
                    f"commits {others} completed since {time} started and touched the same "
                    "file groups or keys",
                    others=others,
                    table=table.path,
                    instant=time,
                )
            completion = table.next_time()
            table.store.complete(D, time, Action.COMMIT, done, completion_time=completion)
            table.store.complete(M, time, Action.DELTACOMMIT, completion_time=completion)
            table.store.complete(G, time, Action.COMMIT, done, completion_time=completion)
        self.close()
        return time

    def _verdict(
        self, groups: set[tuple[str, str]], my_keys: Callable[[], frozenset[str]]
    ) -> conflicts.Verdict:
        """Gather what the conflict rules need (``writers.conflicts``) and judge. Under the
        table lock: commits completed since the read point, rollbacks and restores requested
        since this write began."""
        table, time = self.table, self.time
        assert time is not None
        mine = conflicts.Mine(time=time, read_at=self.read_at, groups=frozenset(groups))
        visible = {i.time for i in table.visibility().visible}
        others = []
        for inst in table.timeline(G):
            if inst.action in (Action.ROLLBACK, Action.RESTORE) and inst.time >= time:
                requested = Instant(inst.time, inst.action, State.REQUESTED)
                where = table.store.path_of(G, requested)
                plan = decode_body(table.store.read_body(G, requested), RestoreBody, where=where)
                others.append(
                    conflicts.Other(time=inst.time, action=inst.action, target=plan.target)
                )
            elif (
                inst.action is Action.COMMIT
                and inst.time in visible
                and inst.completion_time is not None
                and inst.completion_time > mine.since
            ):
                others.append(self._commit_of(inst))
        return conflicts.check(mine, others, my_keys, self._keys_of)

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


def schema_as_of(table: TableTimelines, as_of: str | None = None) -> list[FieldSpec]:
    """The table schema as of a read point: that of the latest visible commit."""
    for inst in reversed(table.visibility(as_of).visible):
        if inst.action is Action.COMMIT:
            body = read_commit(table, inst)
            if body.schema:
                return list(body.schema)
    return list(table.config.schema)
