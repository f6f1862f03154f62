"""Compaction of merge-on-read data file groups (``WriteClient.compact``): every file slice
with enough logs (``min_logs`` log files or ``min_log_bytes`` of them) is folded into a new
base by ``writers.write.compact``, all in one commit of operation ``compaction`` through
``writers.commit.envelope.run_write``, so it is atomic, rolled back on failure, undoable,
cleaned and recovered like any write.

Concurrency: the compaction is a commit that rewrites its file groups, so a write that
appended to one of them after the compaction's read point and completed first makes the
compaction fail with a retryable conflict (nothing lost, its new bases rolled back), and a
write that completes after the compaction conflicts likewise and is retried; a log appended
meanwhile is never folded (the compaction names the logs it folds), so no row is lost either
way (``docs/architecture.md``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter

from lakebraid.index.file_groups import DataSlice, checked_files, current_slices
from lakebraid.metadata.commits import WriteStatus, schema_as_of
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.durable import storage_of
from lakebraid.timeline.errors import ConfigError
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers import settings
from lakebraid.writers.commit.ahead import TaskWrite
from lakebraid.writers.commit.envelope import run_write
from lakebraid.writers.write.compact import CompactTask, compact_file_group
from lakebraid.writers.write.datafile import spec_of
from lakebraid.writers.write.filegroup import RewriteTask
from lakebraid.writers.write.operations import ordering

LOG = logging.getLogger("lakebraid")
# instant time -> the write's statuses (or those and the index files its tasks wrote)
Write = Callable[[str], list[WriteStatus] | TaskWrite]


def due_slices(
    files: dict[str, dict[str, int]],
    min_logs: int,
    min_log_bytes: int | None,
    only: Collection[tuple[str, str]] | None = None,
) -> list[DataSlice]:
    """The slices of a ``files`` listing whose logs reach ``min_logs`` files or
    ``min_log_bytes`` bytes (either suffices); ``only``: of these (partition, file id)
    groups."""
    due = []
    for partition, groups in sorted(current_slices(files).items()):
        for piece in sorted(groups.values(), key=lambda s: s.file_id):
            if only is not None and (partition, piece.file_id) not in only:
                continue
            size = sum(files[partition][n] for n in piece.logs)
            enough = len(piece.logs) >= min_logs or (
                min_log_bytes is not None and size >= min_log_bytes
            )
            if piece.logs and enough:
                due.append(piece)
    return due


def compact_data(
    table: TableTimelines,
    metadata: MetadataTable,
    min_logs: int = 1,
    min_log_bytes: int | None = None,
    only: Collection[tuple[str, str]] | None = None,
) -> str | None:
    """Compact the due file slices (``only``: of these groups) as one commit; returns its
    instant (None: none due)."""
    if type(min_logs) is not int or min_logs < 1:
        raise ConfigError(
            f"compact: min_log_files must be a whole number of at least 1, not {min_logs!r:.40}",
            table=table.path,
        )
    started = perf_counter()
    reader = metadata.reader()
    due = due_slices(checked_files(reader), min_logs, min_log_bytes, only)
    if not due:
        return None
    schema = schema_as_of(table)
    order = ordering(table)

    def write(time: str) -> list[WriteStatus]:
        tasks = [
            CompactTask(
                rewrite=RewriteTask(
                    root=table.fs.unstrip_protocol(table.layout.root),
                    storage=storage_of(table.fs),
                    record_key=table.config.record_key,
                    partition=piece.partition,
                    file_id=piece.file_id,
                    old_file=piece.base,
                    instant=time,
                    write_token=f"{n}-0",
                    schema=spec_of(schema),
                    precombine=order,
                ),
                logs=piece.logs,
                ordering=order,
            )
            for n, piece in enumerate(due)
        ]
        with ThreadPoolExecutor(min(len(tasks), max(2, os.cpu_count() or 2))) as pool:
            return list(pool.map(compact_file_group, tasks))

    return run_write(table, metadata, "compaction", reader.point.read_at, schema, write, started)


class Written:
    """The data file groups a write's statuses name, recorded as its write runs (what
    :func:`compact_if_due` may compact after it)."""

    def __init__(self) -> None:
        self.groups: set[tuple[str, str]] = set()

    def recording(self, write: Write) -> Write:
        """``write`` (instant time -> statuses), recording the groups of its statuses."""

        def run(time: str) -> list[WriteStatus] | TaskWrite:
            done = write(time)
            statuses = done.statuses if isinstance(done, TaskWrite) else done
            self.groups.update((s.partition, s.file_id) for s in statuses)
            return done

        return run


def compact_if_due(table: TableTimelines, metadata: MetadataTable, written: Written) -> str | None:
    """The inline compaction a merge-on-read write runs after its commit
    (``compaction.inline``, ``compaction.max.log.files``, ``compaction.max.log.bytes``), of
    the due file groups among those the write wrote (``written``). Groups other writers
    append to are left to them: a compaction of one would make their next commit conflict
    (a retryable conflict, but writers of disjoint partitions would trip over each other's
    compactions). A failure is logged, never raised: the write it follows has committed."""
    options = table.options
    if not table.config.merge_on_read or not options.get(settings.COMPACT_INLINE):
        return None
    files, size = (
        options.get(settings.COMPACT_MAX_LOG_FILES),
        options.get(settings.COMPACT_MAX_LOG_BYTES),
    )
    if not written.groups:
        return None
    try:
        return compact_data(table, metadata, files, size, written.groups)
    except Exception as exc:
        LOG.warning("%s: inline data compaction failed (the write stands): %s", table.path, exc)
        return None
