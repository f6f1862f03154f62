"""The in-process engine: per-file-group rewrites on a few threads of this process.

It runs ``writers.filegroup.rewrite_file_group`` on (task, rows) pairs, the same function the
Spark engine (``writers.spark_pipeline``) runs in executors; small writes and pyarrow or
pandas input take this path so they pay for no Spark job.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, Protocol

import numpy as np
import pyarrow as pa

from writers.filegroup import RewriteTask, WriteStatus, rewrite_file_group


class Work(NamedTuple):
    """One file group's rewrite: its rows are ``rows`` at ``positions`` (all of ``rows`` when
    None), taken on the engine's thread."""

    task: RewriteTask
    rows: pa.Table
    positions: np.ndarray | None = None

    def size(self) -> int:
        return self.rows.num_rows if self.positions is None else len(self.positions)

    def run(self) -> WriteStatus:
        rows = self.rows if self.positions is None else self.rows.take(pa.array(self.positions))
        return rewrite_file_group(self.task, rows)


class Engine(Protocol):
    def rewrite(self, work: Sequence[Work]) -> list[WriteStatus]: ...


class InProcessEngine:
    """Runs tasks in this process on a few threads (pyarrow releases the GIL)."""

    def __init__(self, threads: int | None = None):
        self.threads = threads or max(2, os.cpu_count() or 2)

    def rewrite(self, work: Sequence[Work]) -> list[WriteStatus]:
        """Statuses in the order of ``work``; the largest tasks start first (rewrites of an
        existing file, then by incoming rows), so no thread is left with a big one at the end."""
        if len(work) <= 1:
            return [w.run() for w in work]
        order = sorted(
            range(len(work)),
            key=lambda i: (work[i].task.old_file is not None, work[i].size()),
            reverse=True,
        )
        with ThreadPoolExecutor(self.threads) as pool:
            statuses = list(pool.map(lambda i: work[i].run(), order))
        done = dict(zip(order, statuses, strict=True))
        return [done[i] for i in range(len(work))]
