"""The driver half of ``test_cluster.py``, run as its own process: one Python process holds one
SparkContext, and a pytest worker already holds a ``local[2]`` one.

``python cluster_driver.py <master URL> <spec.json> <ready file>`` starts its JVM at once,
connects to the standalone master once the ready file exists (the master is up), waits for two
executors, records where tasks run (the test checks it is below the workers), then, for each
table of the spec in turn (a local path, an ``s3://`` URL), drives a ``WriteClient`` through
create, insert, upsert, delete, upsert, rollback of that upsert and reads as of earlier
instants, every Spark DataFrame write on the Spark-native pipeline
(``write.inprocess.max.rows=0``). It prints one JSON document as its last stdout line; the test
compares it with a model of its own.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import SparkConf, SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakebraid.timeline.durable import is_local
from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine.spark.session import embedded_session

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DRIVER_JVM = {"spark.driver.memory": "1g", "spark.driver.extraJavaOptions": QUICK_JVM}
CONF = {
    **DRIVER_JVM,
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.extraJavaOptions": QUICK_JVM,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    # start jobs only once both executors are in (the default waits for 80% of cores, 30 s)
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
}
SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), False),
        pa.field("day", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("amount", pa.float64()),
    ]
)
OPTIONS = {"write.inprocess.max.rows": 0, "write.target.file.rows": 4}
EXECUTORS = 2
WAIT_S = 120.0


def ancestors(pid: int) -> list[int]:
    """``pid`` and its parents up to init, from /proc."""
    chain = [pid]
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        chain.append(pid)
    return chain


def where_am_i(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One row per task: the Python worker's pid and its ancestors (the executor JVM among
    them). A ``mapInArrow`` like the write pipeline's, so it also starts their Python workers."""
    for _ in batches:
        pass
    time.sleep(0.3)  # hold the slot so the next task goes to the other executor
    yield pa.RecordBatch.from_pydict({"chain": [ancestors(os.getpid())]})


def executors(spark: SparkSession) -> list[str]:
    """host:port of every block manager the driver knows, the driver's own included."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return sorted(f"{info.host()}:{info.port()}" for info in infos)


def wait_for_executors(spark: SparkSession) -> list[str]:
    deadline = time.monotonic() + WAIT_S
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    while status().size() < EXECUTORS + 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {executors(spark)} registered after {WAIT_S} s")
        time.sleep(0.2)
    return executors(spark)


def frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema=SCHEMA)).repartition(2)


def rows_of(client: WriteClient, as_of: str | None = None) -> list[dict[str, Any]]:
    """The table read by Spark (executors read the Parquet files), with each row's file. On an
    object store executors read through fsspec, so Spark knows no input file: each key's file
    comes from reading the files of the read point here."""
    if is_local(client.table.fs):
        read = client.read(as_of=as_of).select(*SCHEMA.names, F.input_file_name().alias("file"))
        return [row.asDict() for row in read.collect()]
    holder = {}
    for url in client.file_paths(as_of=as_of):
        with client.table.fs.open(url, "rb") as handle:
            for key in pq.read_table(handle, columns=["id"]).column("id").to_pylist():
                holder[key] = client.table.fs.unstrip_protocol(url)
    read = client.read(as_of=as_of).select(*SCHEMA.names)
    return [{**row.asDict(), "file": holder[row["id"]]} for row in read.collect()]


def lookups(client: WriteClient, keys: list[str], as_of: str | None = None) -> dict[str, Any]:
    found = client.lookup(keys, as_of=as_of)
    return {k: None if v is None else [v.partition, v.file_id] for k, v in found.items()}


def connect(master: str, ready: Path, timings: dict[str, float]) -> SparkSession:
    """Start the driver JVM while the cluster comes up (its options must be known now), then
    the session once the master is up."""
    started = time.monotonic()
    SparkContext._ensure_initialized(conf=SparkConf().setAll(list(DRIVER_JVM.items())))
    timings["jvm"] = time.monotonic() - started
    deadline = time.monotonic() + WAIT_S
    while not ready.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ready} did not appear within {WAIT_S} s")
        time.sleep(0.1)
    timings["master_up"] = time.monotonic() - started
    return embedded_session("lakebraid-cluster-test", master=master, conf=CONF)


def drive_table(
    spark: SparkSession, spec: dict[str, Any], path: str, timings: dict[str, float], started: float
) -> dict[str, Any]:
    """One table at ``path`` through every step of the spec; what the test checks of it."""
    keys = spec["keys"]
    client = WriteClient.create(path, "id", ["day"], "ts", spark=spark, **OPTIONS)
    steps: dict[str, Any] = {}
    instants: dict[str, str] = {}

    def record(step: str, instant: str) -> None:
        instants[step] = instant
        steps[step] = {
            "instant": instant,
            "rows": rows_of(client),
            "lookup": lookups(client, keys),
            "problems": client.validate(),
        }
        timings[f"{path} {step}"] = time.monotonic() - started

    record("insert", client.insert(frame(spark, spec["insert"])))
    record("upsert", client.upsert(frame(spark, spec["upsert"])))
    record("delete", client.delete(spec["delete"]))
    record("upsert_undone", client.upsert(frame(spark, spec["upsert_undone"])))
    record("rollback", client.rollback(instants["upsert_undone"]))
    return {
        "path": path,
        "steps": steps,
        "as_of": {
            step: {
                "rows": rows_of(client, instants[step]),
                "lookup": lookups(client, keys, instants[step]),
            }
            for step in ("insert", "upsert")
        },
        "timeline": [[i.action.value, i.state.value, i.time] for i in client.timeline()],
    }


def run(master: str, spec: dict[str, Any], ready: Path) -> dict[str, Any]:
    """Seconds since the start in ``timings`` after each step."""
    started = time.monotonic()
    timings: dict[str, float] = {}
    spark = connect(master, ready, timings)
    sc = spark.sparkContext
    timings["session"] = time.monotonic() - started
    out: dict[str, Any] = {
        "master": sc.master,
        "driver_pid": os.getpid(),
        "driver_jvm_pid": sc._jvm.java.lang.ProcessHandle.current().pid(),
        "executors": wait_for_executors(spark),
        "timings": timings,
    }
    timings["executors"] = time.monotonic() - started
    probe = spark.range(0, 4, 1, 4).mapInArrow(where_am_i, "chain array<long>")
    out["tasks"] = [row["chain"] for row in probe.collect()]
    out["timings"]["probe"] = time.monotonic() - started
    out["tables"] = [drive_table(spark, spec, path, timings, started) for path in spec["paths"]]
    out["timings"]["total"] = time.monotonic() - started
    spark.stop()
    return out


def main() -> None:
    master, spec, ready = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    result = run(master, json.loads(spec.read_text()), ready)
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
