"""``make demo``: the end-to-end story on embedded defaults (local Spark, local files).

Today (timeline layer): start the embedded Spark session, generate a trips dataset, create a
table with its schema, walk one instant through requested -> inflight -> completed on all
three timelines, leave a second one half-finished as a crashed writer would, and print the
timelines and what a reader may see. Later issues extend this to real writes.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from pyspark.sql import functions as F

from timeline.instant import Action
from timeline.layout import TimelineKind
from timeline.table import TableTimelines
from timeline.table_config import TableConfig, schema_to_fields
from writers.cli import format_timeline
from writers.spark import embedded_session

G, D, M = TimelineKind.GLOBAL, TimelineKind.DATA, TimelineKind.METADATA


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--path", default="demo-output/trips")
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    started = time.perf_counter()
    spark = embedded_session("lakebraid-demo")
    trips = (
        spark.range(args.rows)
        .withColumn("trip_id", F.expr("uuid()"))
        .withColumn(
            "day", F.expr("date_format(date_add('2024-01-01', cast(id % 7 as int)), 'yyyy-MM-dd')")
        )
        .withColumn("fare", F.round(F.rand(7) * 80 + 3, 2))
        .withColumn("ts", F.col("id"))
        .drop("id")
    )
    schema = trips.limit(0).toArrow().schema
    print(f"generated {trips.count():,} trips with Spark {spark.version}: {schema.names}")

    shutil.rmtree(args.path, ignore_errors=True)
    Path(args.path).parent.mkdir(parents=True, exist_ok=True)
    config = TableConfig(
        name="trips",
        record_key="trip_id",
        partition_fields=["day"],
        precombine_field="ts",
        schema=schema_to_fields(schema),
    )
    table = TableTimelines.create(args.path, config)
    print(f"created table {table.path}")

    # one instant, all the way (the commit protocol's skeleton, without data files yet)
    done = table.next_time()
    with table.heartbeat(done):
        with table.lock:
            for kind, action in ((G, Action.COMMIT), (D, Action.COMMIT), (M, Action.DELTACOMMIT)):
                table.store.request(kind, done, action)
        table.store.start(D, done, Action.COMMIT)
        table.store.start(M, done, Action.DELTACOMMIT)
        table.store.start(G, done, Action.COMMIT)
        with table.lock:
            completion = table.next_time()
            for kind, action in ((D, Action.COMMIT), (M, Action.DELTACOMMIT), (G, Action.COMMIT)):
                table.store.complete(kind, done, action, completion_time=completion)
    # a second one whose writer "crashed" after completing on data but not on global
    crashed = table.next_time()
    with table.lock:
        for kind, action in ((G, Action.COMMIT), (D, Action.COMMIT), (M, Action.DELTACOMMIT)):
            table.store.request(kind, crashed, action)
    table.store.start(D, crashed, Action.COMMIT)
    table.store.start(G, crashed, Action.COMMIT)
    table.store.complete(D, crashed, Action.COMMIT)

    for kind in (G, D, M):
        print(format_timeline(table, kind))
    visible = [i.time for i in table.visibility().visible]
    dead = [i.time for i in table.dead_instants()]
    print(f"visible to readers: {visible}; pending with no live writer: {dead}")
    print(f"demo finished in {time.perf_counter() - started:.1f} s")
    spark.stop()


if __name__ == "__main__":
    main()
