"""Config keys of the write client (registered in the one registry, ``timeline.config``)."""

from __future__ import annotations

from lakebraid.timeline import config as cfg

SMALL_WRITE_ROWS = cfg.register(
    "write.inprocess.max.rows",
    int,
    2_000_000,
    "A Spark DataFrame write of at most this many rows is collected and runs in-process on "
    "pyarrow (no further Spark jobs); larger ones run as Spark tasks, and 0 sends every "
    "Spark DataFrame to Spark. pyarrow and pandas input always runs in-process.",
    cfg.at_least(0),
)
TARGET_FILE_ROWS = cfg.register(
    "write.target.file.rows",
    int,
    1_000_000,
    "Rows a data file group grows to by inserts; small groups (write.small.file.rows) take "
    "inserts first, the rest go to new file groups of at most this many rows.",
    cfg.at_least(1),
)
SMALL_FILE_ROWS = cfg.register(
    "write.small.file.rows",
    int,
    100_000,
    "A file group under this many rows is small: inserts fill it (up to "
    "write.target.file.rows) before new file groups are made. Copy-on-write rewrites the "
    "whole group, so a lower limit writes less for many small appends, a higher one leaves "
    "fewer files.",
    cfg.at_least(0),
)
SYNC_BATCH_FILES = cfg.register(
    "write.sync.batch.files",
    int,
    64,
    "An in-process write of at least this many data files on local disk names them all in "
    "one batch marker before the first is written and makes them durable with one syncfs of "
    "the table's file system after the last, instead of a marker and two fsyncs per file. "
    "syncfs waits for every dirty page of that file system, other processes' too: where "
    "other jobs write heavily to the same disk, raise it, or set 0 to never batch.",
    cfg.at_least(0),
)
CONFLICT_RETRIES = cfg.register(
    "write.conflict.retries",
    int,
    0,
    "Times a write (the write client's insert, bulk_insert, upsert and delete, the Spark "
    "data source's appends) that lost a conflict to a concurrent commit is run again from "
    "the start before WriteConflictError reaches the caller: the "
    "lost attempt was rolled back whole, and each retry reads the table afresh, after a "
    "random pause that doubles each time. A Spark DataFrame given to the write client is "
    "evaluated again by each retry: retry only inputs that give the same rows again (a data "
    "source append retries its staged rows). 0: raise at once.",
    cfg.at_least(0),
)
EXPECTED_RECORDS = cfg.register(
    "index.expected.records",
    int,
    0,
    "Records the table is expected to hold; at creation the number of record-index file "
    "groups is estimated from it (metadata.record_index.records.per.group).",
    cfg.at_least(0),
)

DUPLICATE_POLICIES = ("fail", "drop", "upsert")
INSERT_DUPLICATES = cfg.register(
    "insert.duplicates",
    str,
    "fail",
    "What insert, bulk_insert and the data source's append do with keys the table already "
    "holds: fail (refuse the whole write before anything is written, naming the count and "
    "up to 10 keys), drop (skip those rows, keep the stored ones) or upsert (update them). "
    "A write may override it (insert(df, duplicates=...)). A write into an empty table "
    "needs no lookup.",
    lambda v: None if v in DUPLICATE_POLICIES else f"must be one of {DUPLICATE_POLICIES}",
)

MERGE_MODES = ("event_time", "commit_time")
MERGE_MODE = cfg.register(
    "write.merge.mode",
    str,
    "event_time",
    "How an upsert orders an incoming row against the stored row of its key: event_time "
    "(the higher precombine value wins, ties go to the incoming row; an older event never "
    "overwrites a newer one, as Hudi 1.x's default) or commit_time (the latest write wins). "
    "Rows of one batch are always ordered by the precombine field.",
    lambda v: None if v in MERGE_MODES else f"must be one of {MERGE_MODES}",
)

COMPACT_INLINE = cfg.register(
    "compaction.inline",
    bool,
    True,
    "Merge-on-read tables: after each write, compact the file groups it wrote whose logs "
    "reached compaction.max.log.files or compaction.max.log.bytes (one compaction commit; "
    "groups other writers append to are left to them). A compaction that fails never fails "
    "the write (it is logged and tried after the next write to the group). Off: run "
    "WriteClient.compact() or `lakebraid compact PATH --data` instead.",
)
COMPACT_MAX_LOG_FILES = cfg.register(
    "compaction.max.log.files",
    int,
    10,
    "Merge-on-read: a file group with this many log files is due for compaction.",
    cfg.at_least(1),
)
COMPACT_MAX_LOG_BYTES = cfg.register(
    "compaction.max.log.bytes",
    int,
    128 * 2**20,
    "Merge-on-read: a file group whose log files hold this many bytes is due for compaction.",
    cfg.at_least(1),
)
