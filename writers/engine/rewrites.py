"""Rewrites of the in-process engine: the file groups of one write written on a few threads
of this process (pyarrow releases the GIL), each file durable before :meth:`InProcessEngine
.rewrite` returns; a write of one file runs on the calling thread, many new small groups
together (``writers.write.newgroups``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from fsspec import AbstractFileSystem

from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.commits import WriteStatus
from lakebraid.metadata.gather import Views, take_rows, taken_by_key
from lakebraid.timeline import progress
from lakebraid.timeline.durable import filesystem, is_local, make_all_durable, make_durable
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers import settings
from lakebraid.writers.write.filegroup import RewriteTask, rewrite_file_group
from lakebraid.writers.write.logappend import AppendTask, append_to_file_group
from lakebraid.writers.write.marking import mark_all
from lakebraid.writers.write.newgroups import qualifies, write_new_groups

SYNC_THREADS = 4  # fsync waits on the disk, not the CPU
BATCHED_GROUPS = 16  # new small file groups in one write from which they are written together
BATCH_BYTES = 256 << 20  # rows (in Arrow bytes) of the new small groups written in one batch


class Work(NamedTuple):
    """One file group's rewrite (or, merge-on-read, append): its rows are ``rows`` at
    ``positions`` (all of ``rows`` when None), taken on the engine's thread."""

    task: RewriteTask | AppendTask
    rows: pa.Table
    positions: np.ndarray | None = None
    copies: tuple[str, ...] = ()  # columns of ``rows`` holding the record keys themselves
    words: np.ndarray | None = None  # keyorder.ordering_words of the record keys of ``rows``
    views: Views | None = None  # gather.fixed_columns of ``rows``

    def size(self) -> int:
        return self.rows.num_rows if self.positions is None else len(self.positions)

    def rewrites(self) -> bool:
        """Whether it rewrites an existing file (the costliest kind)."""
        return isinstance(self.task, RewriteTask) and self.task.old_file is not None

    def run(self, sync: bool = True, marked: bool = False) -> WriteStatus:
        positions = self.positions
        if positions is None:
            rows = self.rows
        elif isinstance(self.task, RewriteTask) and not self.rewrites():
            # a new group's rows sorted by key as taken: its file is written as taken
            rows = taken_by_key(
                self.rows, RECORD_KEY, positions, self.copies, self.words, self.views
            )
        else:
            rows = take_rows(self.rows, positions, self.views)
        if isinstance(self.task, AppendTask):
            return append_to_file_group(self.task, rows, sync=sync, marked=marked)
        return rewrite_file_group(self.task, rows, sync=sync, marked=marked)


class InProcessEngine:
    """Runs tasks in this process on a few threads (pyarrow releases the GIL). Every written
    file is durable before :meth:`rewrite` returns (so before any commit names it): a few
    files are fsynced on separate I/O threads while other rewrites run; from ``batch_files``
    files (``write.sync.batch.files``) on local disk, one batch marker names them all before
    the first is written and one ``syncfs`` makes them durable after the last
    (``timeline.durable.make_all_durable``)."""

    def __init__(
        self, threads: int | None = None, batch_files: int = settings.SYNC_BATCH_FILES.default
    ):
        self.threads = threads or max(2, os.cpu_count() or 2)
        self.batch_files = batch_files  # 0: never batch

    def rewrite(self, work: Sequence[Work]) -> list[WriteStatus]:
        """Statuses in the order of ``work``; the largest tasks start first (rewrites of an
        existing file, then by incoming rows), so no thread is left with a big one at the end."""
        if not work:
            return []
        fs, root = filesystem(work[0].task.root, work[0].task.storage)
        layout = TableLayout(root)
        batch = is_local(fs) and 0 < self.batch_files <= len(work)
        if batch:
            mark_all(fs, layout, work[0].task.instant, [w.task.output() for w in work])
        few = _new_and_small(work)
        if len(work) == 1 and not few:  # one file: written and made durable on this thread
            with progress.task("write data files", total=1) as bar:
                statuses = [work[0].run(sync=not batch, marked=batch)]
                bar.advance()
        else:
            statuses = self._pooled(work, few, batch, fs, layout)
        if batch:
            written = [s for s in statuses if s.file_name is not None]
            paths = [layout.data_file(s.partition, s.file_name) for s in written]
            make_all_durable(fs, root, paths)
        return statuses

    def _pooled(
        self,
        work: Sequence[Work],
        few: list[int],
        batch: bool,
        fs: AbstractFileSystem,
        layout: TableLayout,
    ) -> list[WriteStatus]:
        """The statuses of several files: rewrites on the engine's threads, each file fsynced
        on an I/O thread unless ``batch`` (then the caller's syncfs), the ``few`` new small
        groups together."""
        batched = set(few)
        order = sorted(
            (i for i in range(len(work)) if i not in batched),
            key=lambda i: (work[i].rewrites(), work[i].size()),
            reverse=True,
        )
        with (
            ThreadPoolExecutor(max(1, min(self.threads, len(order)))) as pool,
            ThreadPoolExecutor(SYNC_THREADS) as syncer,
            progress.task("write data files", total=len(work)) as bar,
        ):
            if few:
                together = _write_batched(work, few, sync=not batch, marked=batch, done=bar.advance)

            def one(i: int) -> tuple[WriteStatus, Future[None] | None]:
                status = work[i].run(sync=False, marked=batch)
                bar.advance()
                if status.file_name is None or batch:
                    return status, None
                path = layout.data_file(status.partition, status.file_name)
                return status, syncer.submit(make_durable, fs, path)

            done = dict(zip(order, pool.map(one, order), strict=True))
            if few:
                done.update((i, (status, None)) for i, status in zip(few, together, strict=True))
            for _, durable in done.values():
                if durable is not None:
                    durable.result()  # re-raises a failed fsync: nothing is committed then
        return [done[i][0] for i in range(len(work))]


def _new_and_small(work: Sequence[Work]) -> list[int]:
    """The work items written together by ``writers.write.newgroups`` (new groups of few
    rows taken from one table), if there are at least ``BATCHED_GROUPS`` of them."""
    few = [
        i
        for i, w in enumerate(work)
        if w.positions is not None and w.rows is work[0].rows and qualifies(w.task, w.size())
    ]
    return few if len(few) >= BATCHED_GROUPS else []


def _write_batched(work: Sequence[Work], few: list[int], **options: Any) -> list[WriteStatus]:
    """``writers.write.newgroups`` over ``few``, in batches of about ``BATCH_BYTES`` of rows
    each (a batch holds a copy of its rows: memory stays bounded whatever the write)."""
    rows = work[few[0]].rows
    per_row = max(1, rows.nbytes // max(1, rows.num_rows))
    sizes = np.array([work[i].size() for i in few], dtype=np.int64) * per_row
    batch_of = ((np.cumsum(sizes) - sizes) // BATCH_BYTES).tolist()  # by where each starts
    statuses: list[WriteStatus] = []
    for _, members in itertools.groupby(zip(batch_of, few, strict=True), key=lambda p: p[0]):
        chunk = [i for _, i in members]
        tasks = [work[i].task for i in chunk]
        positions = [work[i].positions for i in chunk]
        statuses += write_new_groups(tasks, rows, positions, **options)  # type: ignore[arg-type]
    return statuses
