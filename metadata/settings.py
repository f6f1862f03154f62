"""Config keys of the metadata table (registered in the one registry, ``timeline.config``)."""

from __future__ import annotations

from lakebraid.timeline import config as cfg


def _fraction(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must lie between 0 and 1"


LOOKUP_SCAN_FRACTION = cfg.register(
    "metadata.lookup.scan.fraction",
    float,
    0.3,
    "A lookup in a base file seeks (reads only the row groups whose key range holds a wanted "
    "key) while those row groups are at most this fraction of the file, else it scans the "
    "file once and hash-joins (measured: seeking wins below about 30%).",
    _fraction,
)
BASE_ROW_GROUP_ROWS = cfg.register(
    "metadata.base.row.group.rows",
    int,
    16_384,
    "Rows per row group of a metadata base file: smaller groups make lookups of few keys "
    "read less, larger ones make scans and the footer cheaper.",
    cfg.at_least(1),
)
RECORDS_PER_GROUP = cfg.register(
    "metadata.record_index.records.per.group",
    int,
    1_000_000,
    "Record-index entries per file group when the number of file groups is estimated from a "
    "record count (index.expected.records).",
    cfg.at_least(1),
)
MIN_GROUPS = cfg.register(
    "metadata.record_index.min.groups",
    int,
    1,
    "Fewest record-index file groups: a new table starts with at least this many (with or "
    "without index.expected.records), and no estimate gives fewer.",
    cfg.at_least(1),
)
MAX_GROUPS = cfg.register(
    "metadata.record_index.max.groups",
    int,
    10_000,
    "Most record-index file groups an estimate may give.",
    cfg.at_least(1),
)
COMMIT_BASES = cfg.register(
    "metadata.record_index.commit.bases",
    bool,
    True,
    "A write whose record-index entries fall in a file group that holds no file yet (a new "
    "table's first bulk insert) writes them as that group's base file, not as a log a "
    "compaction would rewrite at once: a third of the bytes on disk, no compaction.",
)
AUTO_RESIZE = cfg.register(
    "metadata.record_index.auto.resize",
    bool,
    True,
    "After an inline metadata compaction, reshard the record index when its entries per file "
    "group pass records.per.group times metadata.record_index.resize.factor (a reindex "
    "instant; writers that overlap it retry).",
)
RESIZE_FACTOR = cfg.register(
    "metadata.record_index.resize.factor",
    float,
    2.0,
    "How far entries per record-index file group may grow past records.per.group before the "
    "automatic resize reshards to the estimate for the current entry count.",
    lambda value: None if value >= 1.0 else "must be at least 1.0",
)
SECONDARY_GROUPS = cfg.register(
    "metadata.secondary_index.file.groups",
    int,
    4,
    "File groups of the secondary_index partition, fixed by the first index build (later "
    "builds keep the count writers route by).",
    cfg.at_least(1),
)
STATS_MAX_COLUMNS = cfg.register(
    "metadata.column_stats.max.columns",
    int,
    32,
    "Column statistics are recorded in the metadata table for the first this many columns of "
    "the table's schema (wide tables keep their metadata small; reads prune only by those "
    "columns, keeping every file for the others). More columns get statistics on a live table "
    "with WriteClient.create_index(columns, kind='column_stats') (lakebraid index build PATH "
    "--column-stats a,b).",
    cfg.at_least(0),
)
LOOKUP_THREADS = cfg.register(
    "metadata.lookup.threads",
    int,
    4,
    "Threads that read metadata file groups in parallel in one process (Parquet decoding "
    "releases the GIL); on a local disk at most one per core.",
    cfg.at_least(1),
)
WRITE_THREADS = cfg.register(
    "metadata.write.threads",
    int,
    2,
    "Threads that encode and write record-index log blocks, and fold file groups into new "
    "bases during compaction, in parallel in one process (the work is Arrow kernels and "
    "I/O, which release the GIL).",
    cfg.at_least(1),
)
COMPACT_LOG_FILES = cfg.register(
    "metadata.compact.max.log.files",
    int,
    8,
    "After a commit, metadata file groups with this many log files since their base are "
    "compacted inline (0 turns inline compaction off).",
    cfg.at_least(0),
)
COMPACT_LOG_BYTES = cfg.register(
    "metadata.compact.max.log.bytes",
    int,
    256 * 1024,
    "After a commit, metadata file groups whose log files since their base add up to this "
    "many bytes are compacted inline (large writes fold at once, so lookups stay fast).",
    cfg.at_least(1),
)
COMPACT_LOG_RATIO = cfg.register(
    "metadata.compact.log.ratio",
    float,
    0.5,
    "An inline compaction folds a metadata file group (reached max.log.files or max.log.bytes) "
    "only once its logs hold this fraction of its base's entries (their bytes when the counts "
    "are unknown): a rewrite of the base then costs in proportion to what the commits wrote, "
    "not to the table (0: no such wait).",
    cfg.at_least(0),
)
COMPACT_SMALL_BASE_BYTES = cfg.register(
    "metadata.compact.small.base.bytes",
    int,
    1024 * 1024,
    "A metadata file group whose base is smaller than this many bytes is compacted inline at "
    "max.log.files or max.log.bytes without waiting for log.ratio: its rewrite is cheap, and "
    "lookups and listings then read at most max.log.files logs of it (0: always wait).",
    cfg.at_least(0),
)
COMPACT_SMALL_BASE_ENTRIES = cfg.register(
    "metadata.compact.small.base.entries",
    int,
    100_000,
    "A base under metadata.compact.small.base.bytes is small (folds without waiting for "
    "log.ratio) only while it also holds fewer entries than this: a rewrite costs per entry, "
    "and keys that compress well put many entries in few bytes.",
    cfg.at_least(0),
)
COMPACT_HARD_LOG_FILES = cfg.register(
    "metadata.compact.hard.log.files",
    int,
    32,
    "A metadata file group with this many log files since its base is compacted inline "
    "whatever its base's size (lookups read every log file of a group).",
    cfg.at_least(1),
)
