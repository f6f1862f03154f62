"""The in-process engine: per-file-group rewrites on a few threads of this process.

It runs ``writers.filegroup.rewrite_file_group`` on (task, rows) pairs, the same function the
Spark engine (``writers.spark_pipeline``) runs in executors; small writes and pyarrow or
pandas input take this path so they pay for no Spark job.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import pyarrow as pa

from writers.filegroup import RewriteTask, WriteStatus, rewrite_file_group

Work = tuple[RewriteTask, pa.Table]


class Engine(Protocol):
    def rewrite(self, work: Sequence[Work]) -> list[WriteStatus]: ...


class InProcessEngine:
    """Runs tasks in this process on a few threads (pyarrow releases the GIL)."""

    def __init__(self, threads: int = 2):
        self.threads = threads

    def rewrite(self, work: Sequence[Work]) -> list[WriteStatus]:
        if len(work) <= 1:
            return [rewrite_file_group(task, rows) for task, rows in work]
        with ThreadPoolExecutor(self.threads) as pool:
            return list(pool.map(lambda w: rewrite_file_group(*w), work))
