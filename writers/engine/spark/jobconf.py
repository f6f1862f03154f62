"""Session settings for the Spark jobs of lakebraid's own write pipeline
(``writers.engine.spark.pipeline``, ``writers.engine.spark.delete``), set around each job and
cache definition and put back right after.

* The columnar cache of the tagged rows is not compressed
  (``spark.sql.inMemoryColumnarStorage.compressed``): the rows are read twice and dropped
  after the write, and compressing them cost five times the caching itself (1M tagged rows
  cached in 3.0 s compressed, 0.45 s not).
* Adaptive query execution is off (``spark.sql.adaptive.enabled``): the pipeline fixes its
  own shuffle partitions (one per tagging or rewrite task) and broadcasts its small tables
  by hint, so adaptive execution has nothing to choose, yet it ran each stage and each
  broadcast as a job of its own with a planning round between (a 1M-row upsert into 10M rows
  on ``local[2]``, medians of five warm runs in three alternated sessions each: 5.88, 6.25,
  6.21 s without it against 6.25, 6.59, 6.42 with it).

Spark reads these when a query is planned (a cache when it is defined, a job when it runs),
so a setting holds for the pipeline's jobs only; a query that another thread of the same
session plans meanwhile sees it too (it changes how fast that query runs, not its result).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

ADAPTIVE = "spark.sql.adaptive.enabled"
COMPRESSED_CACHE = "spark.sql.inMemoryColumnarStorage.compressed"
JOBS: dict[str, str] = {ADAPTIVE: "false"}  # every job of the pipeline
CACHE: dict[str, str] = {**JOBS, COMPRESSED_CACHE: "false"}  # its cache definitions


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
