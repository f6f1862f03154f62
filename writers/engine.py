"""The in-process engine: per-file-group rewrites on a few threads of this process.

It runs ``writers.filegroup.rewrite_file_group`` on (task, rows) pairs, the same function the
Spark engine (``writers.spark_pipeline``) runs in executors; small writes and pyarrow or
pandas input take this path so they pay for no Spark job.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import fsspec
import numpy as np
import pyarrow as pa

from lakebraid.metadata.commits import WriteStatus
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.store import make_durable
from lakebraid.writers.filegroup import RewriteTask, rewrite_file_group

SYNC_THREADS = 4  # fsync waits on the disk, not the CPU


class Work(NamedTuple):
    """One file group's rewrite: its rows are ``rows`` at ``positions`` (all of ``rows`` when
    None), taken on the engine's thread."""

    task: RewriteTask
    rows: pa.Table
    positions: np.ndarray | None = None

    def size(self) -> int:
        return self.rows.num_rows if self.positions is None else len(self.positions)

    def run(self, sync: bool = True) -> WriteStatus:
        rows = self.rows if self.positions is None else self.rows.take(pa.array(self.positions))
        return rewrite_file_group(self.task, rows, sync=sync)


class InProcessEngine:
    """Runs tasks in this process on a few threads (pyarrow releases the GIL). Written files
    are made durable on separate I/O threads while other rewrites run, all before
    :meth:`rewrite` returns (so before any commit names them)."""

    def __init__(self, threads: int | None = None):
        self.threads = threads or max(2, os.cpu_count() or 2)

    def rewrite(self, work: Sequence[Work]) -> list[WriteStatus]:
        """Statuses in the order of ``work``; the largest tasks start first (rewrites of an
        existing file, then by incoming rows), so no thread is left with a big one at the end."""
        if not work:
            return []
        order = sorted(
            range(len(work)),
            key=lambda i: (work[i].task.old_file is not None, work[i].size()),
            reverse=True,
        )
        fs, root = fsspec.core.url_to_fs(work[0].task.root)
        layout = TableLayout(root)
        with (
            ThreadPoolExecutor(min(self.threads, len(work))) as pool,
            ThreadPoolExecutor(SYNC_THREADS) as syncer,
        ):

            def one(i: int) -> tuple[WriteStatus, Future[None] | None]:
                status = work[i].run(sync=False)
                if status.file_name is None:
                    return status, None
                path = f"{layout.partition_dir(status.partition)}/{status.file_name}"
                return status, syncer.submit(make_durable, fs, path)

            done = dict(zip(order, pool.map(one, order), strict=True))
            for _, durable in done.values():
                if durable is not None:
                    durable.result()  # re-raises a failed fsync: nothing is committed then
        return [done[i][0] for i in range(len(work))]
