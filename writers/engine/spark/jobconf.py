"""Session settings for the Spark jobs of lakebraid's own write pipeline
(``writers.engine.spark.pipeline``), set around each Spark write and delete
(``writers.engine.spark.write``, ``writers.engine.spark.delete``) and its cache definition,
and put back right after.

* The columnar cache of the tagged rows is not compressed
  (``spark.sql.inMemoryColumnarStorage.compressed``): the rows are read twice and dropped
  after the write, and compressing them cost five times the caching itself (1M tagged rows
  cached in 3.0 s compressed, 0.45 s not).
* The cache's batches hold as many rows as the Arrow batches the tagged rows arrive in
  (``spark.sql.inMemoryColumnarStorage.batchSize`` = the session's
  ``spark.sql.execution.arrow.maxRecordsPerBatch``; Spark's default is 10,000 either way):
  the rows already crossed from Python in batches that size, so no batch holds more than
  they did, and the embedded session's 100,000 cut the 1M-row upsert's medians by 0.1-0.4 s
  (three alternated sessions, five warm runs each: 6.37/5.55/5.57 s against 6.73/5.92/5.71).
* Adaptive query execution is off (``spark.sql.adaptive.enabled``): the pipeline fixes its
  own shuffle partitions (one per tagging or rewrite task) and broadcasts its small tables
  by hint, so adaptive execution has nothing to choose, yet it ran each stage and each
  broadcast as a job of its own with a planning round between (a 1M-row upsert into 10M rows
  on ``local[2]``, medians of five warm runs in three alternated sessions each: 5.88, 6.25,
  6.21 s without it against 6.25, 6.59, 6.42 with it).

Spark reads these when a query is planned (a cache when it is defined, a job when it runs),
so a setting holds for the write's jobs only; a query that another thread of the same
session plans meanwhile sees it too (it changes how fast that query runs, not its result).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame

from lakebraid.timeline.errors import ConfigError

ADAPTIVE = "spark.sql.adaptive.enabled"
COMPRESSED_CACHE = "spark.sql.inMemoryColumnarStorage.compressed"
CACHE_BATCH = "spark.sql.inMemoryColumnarStorage.batchSize"
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
JOBS: dict[str, str] = {ADAPTIVE: "false"}  # every job of the pipeline


def cache_settings(spark: Any) -> dict[str, str]:
    """The settings of the pipeline's cache definitions in session ``spark``."""
    batch = spark.conf.get(ARROW_BATCH, "10000")
    return {**JOBS, COMPRESSED_CACHE: "false", CACHE_BATCH: batch}


@contextmanager
def job_settings(spark: Any, values: Mapping[str, str] = JOBS) -> Iterator[None]:
    """``values`` set in session ``spark`` for the block, each put back after (unset again
    where the session had no value of its own)."""
    conf = spark.conf
    before = {key: conf.get(key, None) for key in values}
    for key, value in values.items():
        conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)


def cache(frame: DataFrame) -> DataFrame:
    """``frame`` persisted under the pipeline's cache settings (:func:`cache_settings`:
    not compressed, batches of the Arrow batch's rows, planned without adaptive execution)."""
    spark = frame.sparkSession
    with job_settings(spark, cache_settings(spark)):
        return frame.persist()


SPECULATION = "spark.speculation"


def refuse_speculation(spark: Any, table: str) -> None:
    """Raise :class:`ConfigError` when the session runs speculative task attempts: the Spark
    engine's tasks write their files under names fixed by the plan (a file group's file of
    the instant, a record-index group's log), so a second attempt of a task would write the
    same file as the first, and one killed midway could leave a committed file torn. Checked
    before anything is written."""
    value = spark.sparkContext.getConf().get(SPECULATION, "false")
    if str(value).strip().lower() == "true":
        raise ConfigError(
            f"the Spark session runs speculative task attempts ({SPECULATION}=true), which "
            "lakebraid's Spark writes do not support (two attempts of a task write the same "
            f"files); nothing was written: start the session with {SPECULATION}=false, or "
            "write through the data source (df.write.format('lakebraid').mode('append')), "
            "whose tasks stage files of their own",
            table=table,
        )
