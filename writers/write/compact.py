"""Compaction of one merge-on-read file group: its file slice (base and logs, merged as a
snapshot read merges them: ``writers.write.slices.read_unit``) becomes a new base file
``<file id>_<write token>_<instant>.parquet``, written as a copy-on-write rewrite writes one
(marker first, durable before the commit names it). Its write status replaces the old base
(``old_file``) and the logs it folded (``old_logs``): a log appended meanwhile is not among
them and stays in the group's next slice. The new base's rows are sorted by record key (as
a new file group's are), so reads of the next slice match log keys against it by merges
(``keymatch.match_rows``). Rows keep the commit time of the write that last changed them;
the record index is unchanged (no key changes group). Plain picklable data: Spark executors
can run it.
"""

from __future__ import annotations

import msgspec

from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.commits import WriteStatus
from lakebraid.metadata.keyorder import order_unless_sorted
from lakebraid.timeline.durable import filesystem
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.write.datafile import (
    conform,
    data_schema,
    dictionaries_kept,
    virtual_key,
)
from lakebraid.writers.write.filegroup import (
    RewriteTask,
    partition_columns,
    schemas,
    write_group_file,
)
from lakebraid.writers.write.slices import ReadUnit, read_unit


class CompactTask(msgspec.Struct, frozen=True, kw_only=True):
    rewrite: RewriteTask  # the group, its base (``old_file``), the new file's token and instant
    logs: tuple[str, ...]  # the slice's logs to fold, oldest first
    ordering: str | None = None  # the precombine column of event-time ordering


def compact_file_group(task: CompactTask, *, sync: bool = True) -> WriteStatus:
    """Write the group's merged slice as its new base; see the module doc."""
    r = task.rewrite
    fs, root = filesystem(r.root, r.storage)
    layout = TableLayout(root)
    base = layout.data_file(r.partition, r.old_file) if r.old_file is not None else None
    unit = ReadUnit(base, tuple(layout.data_file(r.partition, n) for n in task.logs))
    derive = virtual_key(r.schema, r.record_key)
    # the columns a rewrite keeps as dictionaries (the commit time, the partition columns) and
    # those the base stores so are merged as such: their indices taken and patched, and the
    # new file written from them without hashing a string per row
    _, rewrite_schema = schemas(tuple(r.schema), r.record_key, partition_columns(r))
    schema = dictionaries_kept(data_schema(r.schema), rewrite_schema)
    merged = read_unit(
        fs, unit, schema, derive, task.ordering, threads=False, keep_dictionaries=True
    )
    status = dict(
        partition=r.partition, file_id=r.file_id, old_file=r.old_file, old_logs=list(task.logs)
    )
    if merged.num_rows == 0:  # every row deleted: the group is gone
        return WriteStatus(file_name=None, **status)  # type: ignore[arg-type]
    order = order_unless_sorted(merged.column(RECORD_KEY))  # reads match sorted keys
    if order is not None:  # None: the logs wrote only keys the base holds (merged in place)
        merged = merged.take(order)
    stored = conform(merged, dictionaries_kept(rewrite_schema, merged.schema))
    return write_group_file(fs, layout, r, stored, status, sync)
