"""The embedded Spark session lakebraid starts when the user brings none.

Settings: Python workers must run this interpreter (so they can import pyarrow and
lakebraid), the UI and console progress are off, the session time zone is UTC, and the
driver gets more than the 1 GiB default heap. Rows cross between the JVM and the Python
workers in Arrow batches of up to 100,000 rows (Spark's default is 10,000: fewer, larger
batches cost less per row, and lakebraid's tagging and rewrite hold a task's rows whole
anyway), with no cap in bytes: ``maxBytesPerBatch`` at its largest value, the one at which
Spark skips measuring the batch after every row (with its 64 MiB default that measure took
12% of the executor threads' CPU samples in a 1M-row upsert). A row count is then the only
bound: rows wide enough that 100,000 of them outgrow an Arrow buffer (2 GiB in one column)
fail the write with an :class:`~lakebraid.writers.errors.InputError` saying so
(``writers.engine.spark.write.arrow_limits``); pass a lower ``maxRecordsPerBatch`` as
``conf`` for them. The driver's JVM (in local mode also the executor) collects garbage with
the parallel collector (``-XX:+UseParallelGC``) instead of Java 17's default G1: on two cores
G1's concurrent threads and write barriers take CPU from the tasks, and the 10M-row benchmark
(``benchmarks/spark_engine.py``, two alternated runs each) took 29.4 and 28.8 s to bulk
insert against 38.3 and 35.7 s, 6.11 and 5.51 s for the 1M-row upsert against 6.29 and 6.30,
with the JVM's peak resident memory ~3.0 GiB against ~4.2. Java options given in ``conf``
keep the parallel collector unless they choose a collector themselves
(:func:`session_conf`). Parquet page checksums (which
lakebraid writes, see ``metadata.integrity``) are verified on every read
(``parquet.page.verify-checksum.enabled``): a damaged page fails the read, naming the file,
instead of returning changed values. A user's own session is used as is.
This module registers the ``lakebraid`` data source (``writers.engine.spark.datasource``) on
either: :func:`embedded_session` on the session it returns, :func:`attach` on a user's.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from pyspark import SparkContext
from pyspark.sql import SparkSession

from lakebraid.writers.engine.spark.datasource import register

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "4g",
    JAVA_OPTIONS: "-XX:+UseParallelGC",  # see the module doc
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    "spark.hadoop.parquet.page.verify-checksum.enabled": "true",
}

_COLLECTOR = re.compile(r"-XX:[+-]Use\w*GC\b")  # an option that picks a garbage collector


def session_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """:data:`DEFAULT_CONF` with ``conf`` over it; driver Java options given in ``conf`` that
    choose no garbage collector get the default one's option before them (a user adding a
    system property keeps the parallel collector)."""
    given = dict(conf or {})
    merged = {**DEFAULT_CONF, **given}
    options = given.get(JAVA_OPTIONS)
    if options is not None and not _COLLECTOR.search(options):
        merged[JAVA_OPTIONS] = f"{DEFAULT_CONF[JAVA_OPTIONS]} {options}".strip()
    return merged


def embedded_session(
    app_name: str = "lakebraid",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get (or start) a session; ``local[*]`` unless ``master`` is given."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).master(master or "local[*]")
    for key, value in session_conf(conf).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def active_session() -> SparkSession | None:
    """The session running in this process (this thread's active one, else the default
    one), if any; none is started."""
    if SparkContext._active_spark_context is None:  # no JVM yet: nothing to ask
        return None
    try:
        return SparkSession.active()
    except Exception:  # a context without a session
        return None


def reading_session(given: SparkSession | None, where: object) -> SparkSession | None:
    """The session that reads a filter ``where`` in-process: the one ``given``, else the
    running one; SQL text with neither is read as the embedded session's defaults would read
    it (``writers.read.plan.sql_settings(None)``), without starting one. A Column needs one."""
    if given is not None:
        return given
    return active_session() if isinstance(where, str) else embedded_session()


def attach(session: SparkSession) -> SparkSession:
    """Make ``format("lakebraid")`` available on a session the user brings."""
    register(session)
    return session
