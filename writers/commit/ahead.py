"""Record-index log blocks written ahead: beside a write's data files, not after them.

A write that only inserts new keys knows its record-index entries from its routing
(``writers.write.planned``). :func:`start` writes their log blocks (or commit bases) on a
thread of their own while the engine writes the data files, against the read point taken
when it starts; :meth:`Transaction.commit <writers.commit.transaction.Transaction.commit>`
then uses that same point for the write's other metadata and for its conflict check (rule 5:
a reindex that completed after it, or runs, refuses the write; rule 7: another instant's
file in a group given a commit base refuses it), and first calls :func:`agree`: every data
file holds exactly the new keys planned for its group, none updated or deleted, or the write
fails (and is rolled back) with nothing committed.

What stays as it was: the blocks are files of the pending instant, removed by its rollback
like any other of its files, and named by no completed instant before its commit point; the
thread owes its fsyncs to the write's scope (``timeline.owed``, the scope's context is
copied to it), so they are paid with the rest just before the commit point. The envelope
(``writers.commit.envelope``) waits for the thread before it commits or rolls back, so no
file of the write appears after its rollback.
"""

from __future__ import annotations

import contextvars
import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple, NoReturn

import numpy as np
import pyarrow as pa

from lakebraid.metadata.commits import WriteStatus
from lakebraid.metadata.hashing import file_group_id
from lakebraid.metadata.records import Partition
from lakebraid.metadata.slices import ReadPoint
from lakebraid.metadata.table import MetadataTable
from lakebraid.metadata.writer import InstantChanges, WrittenLog
from lakebraid.writers.errors import WriteError
from lakebraid.writers.services.lifecycle import remove
from lakebraid.writers.write.planned import planned_counts

# the record-index changes (upserts only), or None: none known ahead
Entries = Callable[[], InstantChanges | None]
INDEX = str(Partition.RECORD_INDEX)


class IndexAhead(NamedTuple):
    """The record-index blocks a write wrote ahead: the point it wrote them against, the
    changes they hold (upserts, and their keys' hashes when known) and the log files (and
    commit bases)."""

    point: ReadPoint
    changes: InstantChanges
    logs: list[WrittenLog]

    @property
    def upserts(self) -> pa.Table:
        assert self.changes.index_upserts is not None
        return self.changes.index_upserts


class IndexByTasks(NamedTuple):
    """The record-index files a write's engine tasks wrote (the Spark engine:
    ``writers.engine.spark.index_tasks``), each group's from the keys its data files added or
    removed, as the statuses say (so the driver never receives them): the point whose layout
    they took and the files. They agree with the statuses by construction; a commit base
    beside another instant's file is refused by conflict rule 7 (retry), not rebased (the
    entries are not at hand to write again)."""

    point: ReadPoint
    logs: list[WrittenLog]

    @property
    def entries(self) -> int:
        """The entries (upserts and tombstones) the files hold."""
        return sum(log.records for log in self.logs if log.partition == INDEX)


class TaskWrite(NamedTuple):
    """What a write whose tasks wrote its record-index files returns: its statuses (without
    key lists) and those files."""

    statuses: list[WriteStatus]
    index: IndexByTasks


@functools.cache
def _writer() -> ThreadPoolExecutor:
    """The process's thread for blocks written ahead (made once; a forked child, where the
    parent's thread does not exist, makes its own)."""
    return ThreadPoolExecutor(1, thread_name_prefix="lakebraid-index-ahead")


os.register_at_fork(after_in_child=_writer.cache_clear)


def start(metadata: MetadataTable, instant: str, entries: Entries) -> Future[IndexAhead | None]:
    """Write the record-index blocks of ``instant`` (pending) from ``entries()`` on the
    process's ahead thread, in the layout of the read point taken now; the future's value is
    None when ``entries()`` gives none (the commit then takes them from its statuses)."""
    point = metadata.read_point()  # on the calling thread: the timelines are loaded here

    def write() -> IndexAhead | None:
        changes = entries()
        if changes is None or changes.index_upserts is None:
            return None
        logs = metadata.write(instant, changes, point)
        return IndexAhead(point, changes, logs)

    return _writer().submit(contextvars.copy_context().run, write)


def agree(ahead: IndexAhead, statuses: Sequence[WriteStatus], table: str, instant: str) -> None:
    """Raise :class:`WriteError` unless the statuses wrote what the blocks say: each planned
    group one file holding its planned rows as inserts, no other group, nothing updated or
    deleted (a key the index did not know, yet a rewritten file held, is an update there)."""
    planned = planned_counts(ahead.upserts)
    written = {(s.partition, s.file_id): s for s in statuses}
    for group, rows in planned.items():
        status = written.get(group)
        if status is None or status.file_name is None or status.inserts != rows:
            got = "no file" if status is None or status.file_name is None else status.inserts
            _refuse(
                f"group {group[0]}/{group[1]}: {rows} new keys planned, {got} written",
                table,
                instant,
            )
        if status.updates or status.deletes:
            _refuse(
                f"group {group[0]}/{group[1]}: {status.updates} updates and {status.deletes} "
                "deletes written where only inserts of new keys were planned",
                table,
                instant,
            )
    extra = sorted(set(written) - set(planned))
    if extra:
        _refuse(f"groups {extra} written, not planned", table, instant)


def rebased(metadata: MetadataTable, ahead: IndexAhead, instant: str) -> IndexAhead:
    """``ahead`` as the commit may keep it. The blocks gave each record-index group that held
    no file a commit base; if another instant has put a file in any of those groups since
    (one listing), readers could not take both (conflict rule 7 would refuse the write): the
    bases are taken back and their entries written again, in the same layout, as logs beside
    those files (a group still empty gets a base again, which rule 7 checks at the commit)."""
    bases = [log for log in ahead.logs if log.partition == INDEX and log.name.endswith(".parquet")]
    if not bases or not metadata.base_neighbours(instant, {log.file_group for log in bases}):
        return ahead
    folder = metadata.layout.metadata_partition_dir(INDEX)
    for log in bases:
        remove(metadata.fs, f"{folder}/{log.name}")
    hashes = ahead.changes.index_hashes
    keys = ahead.upserts.column("key")
    numbers = ahead.point.index_groups(keys, hashes)  # the entries' groups, in that layout
    based = {log.file_group for log in bases}
    n = ahead.point.group_counts[INDEX]
    wanted = np.array([file_group_id(INDEX, g) in based for g in range(n)])[numbers]
    again = InstantChanges(
        index_upserts=ahead.upserts.filter(pa.array(wanted)),
        index_hashes=None if hashes is None else hashes[wanted],
    )
    logs = metadata.write(instant, again, ahead.point)
    kept = [log for log in ahead.logs if log not in bases]
    return IndexAhead(ahead.point, ahead.changes, kept + logs)


def _refuse(what: str, table: str, instant: str) -> NoReturn:
    raise WriteError(
        f"the record-index entries written ahead do not match the data files ({what}); the "
        "write is rolled back and nothing of it is committed: run validate() on the table, "
        "then retry the write",
        table=table,
        instant=instant,
    )
