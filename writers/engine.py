"""Engines map the per-file-group rewrite over tasks: in-process threads or Spark tasks.

Both run ``writers.filegroup.rewrite_file_group`` on the same (task, rows) pairs; the Spark
engine ships each pair to an executor as plain data (msgspec + Arrow IPC bytes) and gets the
write status back as msgpack bytes, so no driver-side object ever reaches an executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import msgspec
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


def _to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _run_packed(packed: tuple[bytes, bytes]) -> bytes:
    task = msgspec.msgpack.decode(packed[0], type=RewriteTask)
    rows = pa.ipc.open_stream(packed[1]).read_all()
    return msgspec.msgpack.encode(rewrite_file_group(task, rows))


class SparkEngine:
    """One Spark task per file group."""

    def __init__(self, spark: Any):
        self.spark = spark

    def rewrite(self, work: Sequence[Work]) -> list[WriteStatus]:
        if not work:
            return []
        packed = [(msgspec.msgpack.encode(task), _to_ipc(rows)) for task, rows in work]
        rdd = self.spark.sparkContext.parallelize(packed, len(packed))
        results = rdd.map(_run_packed).collect()
        return [msgspec.msgpack.decode(r, type=WriteStatus) for r in results]
