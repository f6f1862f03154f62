"""The write half of the Spark data source ``lakebraid``: ``df.write.format("lakebraid")
.mode("append").save(path)`` (``writers.engine.spark.datasource`` plans it).

The data source's ``writer()`` checks the path is a lakebraid table, refuses overwrite (upsert
and delete stay on the client) and picks a job id. Executors (:class:`LakebraidWriter.write`)
stage their Arrow batches as Parquet files in ``.braid/staging/<job id>/``
(``TableLayout.staging_dir``) and report each file in their commit message. ``commit()`` runs
in its own Python worker, not the driver: it opens the table with no Spark session and inserts
the staged rows with the in-process engine (``writers.engine.inprocess.write_rows``, the
table's ``insert.duplicates`` policy), so the rows go through the same checks and commit
protocol as any insert (the job's rows are read into that one worker), then deletes the staging
folder. An insert that lost a conflict runs again like the write client's
(``write.conflict.retries``, ``writers.commit.retry``): its rows are the staged files, the same
at every attempt. Only the files named in the messages are read, so a failed or speculative task
attempt's leftovers are never committed. ``abort()`` deletes the staging folder (its messages
may be ``None``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.durable import filesystem, make_folder
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.commit.retry import retrying
from lakebraid.writers.engine.inprocess import write_rows
from lakebraid.writers.services.lifecycle import remove_tree
from lakebraid.writers.services.recovery import recover
from lakebraid.writers.write.datafile import read_parquet
from lakebraid.writers.write.operations import resolve_policy
from lakebraid.writers.write.workers import settle


@dataclass(frozen=True)
class StagedFile(WriterCommitMessage):
    """One write task's staged Parquet file (``path`` None: the task had no rows)."""

    path: str | None
    rows: int


class LakebraidWriter(DataSourceArrowWriter):
    def __init__(self, root: str, job_id: str, options: dict[str, str], storage: dict[str, Any]):
        self.root = root
        self.job_id = job_id
        self.options = options
        self.storage = storage

    def _staging(self) -> tuple[Any, str]:
        fs, root = filesystem(self.root, self.storage)
        return fs, TableLayout(root).staging_dir(self.job_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        settle()
        fs, folder = self._staging()
        path = f"{folder}/{uuid.uuid4().hex}.parquet"
        rows = 0
        sink: pq.ParquetWriter | None = None
        handle = None
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                if sink is None:
                    make_folder(fs, folder)
                    handle = fs.open(path, "wb")
                    sink = pq.ParquetWriter(handle, batch.schema, compression="zstd")
                sink.write_batch(batch)
                rows += batch.num_rows
        finally:
            if sink is not None:
                sink.close()
            if handle is not None:
                handle.close()
        return StagedFile(fs.unstrip_protocol(path) if rows else None, rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        staged = [m.path for m in messages if isinstance(m, StagedFile) and m.path]
        try:
            if staged:
                parts = []
                for url in staged:
                    fs, path = filesystem(url, self.storage)
                    parts.append(read_parquet(fs, path))
                table = TableTimelines.open(self.root, self.options, self.storage)
                insert = partial(_insert, table, pa.concat_tables(parts))
                retrying(table, insert, "data source append")
        finally:
            self._remove_staging()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._remove_staging()

    def _remove_staging(self) -> None:
        fs, folder = self._staging()
        remove_tree(fs, folder)


def _insert(table: TableTimelines, rows: pa.Table) -> str:
    """One attempt at inserting the job's staged ``rows``; its instant."""
    recover(table)
    policy = resolve_policy(table, "insert", None)
    return write_rows(table, MetadataTable(table), rows, "insert", policy)
