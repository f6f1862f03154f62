"""``make demo``: the whole story on embedded defaults (local Spark, local files).

Generates trips with Spark (default 1,000,000 over 30 days), then: create a table, bulk insert,
upsert a mixed batch (updates, new keys, keys moving to another day, duplicates), delete some
keys, print the three timelines, look keys up as of two instants, read as of the first instant
and now (with data skipping), print the time of every step, then ``lakebraid history`` and
``lakebraid show`` of the table. On a terminal, steps past 2 s draw progress bars (rich).
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakebraid.timeline import progress, table_config
from lakebraid.timeline.errors import LakebraidError
from lakebraid.timeline.layout import TimelineKind
from lakebraid.writers.cli.history import format_show
from lakebraid.writers.cli.main import format_timeline
from lakebraid.writers.cli.progress import progress_bars, wanted
from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine.spark.session import embedded_session
from lakebraid.writers.services.history import format_history

T = TypeVar("T")


def step(label: str, work: Callable[[], T]) -> T:
    print(f"-> {label} ...", flush=True)
    started = time.perf_counter()
    with progress.task(label):  # a spinner with the time so far, past 2 s on a terminal
        result = work()
    print(f"   {label}: {time.perf_counter() - started:.2f} s", flush=True)
    return result


def replace_problem(path: Path) -> str | None:
    """Why deleting ``path`` could lose someone's data (None: absent, empty or a demo table)."""
    if not path.exists():
        return None
    if not path.is_dir():
        return f"{path} is a file, not a demo table"
    if not any(path.iterdir()):
        return None
    config = path / ".braid" / "table.json"
    try:
        made = table_config.decode(config.read_bytes(), path=str(config))
    except (OSError, LakebraidError):
        return f"{path} holds files and is not a lakebraid table"
    if (made.record_key, made.partition_fields, made.name) != ("trip_id", ["day"], path.name):
        return f"{path} is a lakebraid table, but not one the demo made"
    return None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--path",
        default="demo-output/trips",
        help="where the demo table goes; a previous demo table there is replaced",
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="trips to generate")
    parser.add_argument(
        "--force", action="store_true", help="replace --path even if it is not a demo table"
    )
    args = parser.parse_args()
    if args.rows < 10:
        parser.error("--rows must be at least 10")
    problem = replace_problem(Path(args.path))
    if problem and not args.force:
        parser.error(f"{problem}; pick another --path, or pass --force to delete it")
    return args


def trips(spark: SparkSession, rows: int) -> DataFrame:
    """``rows`` trips over 30 days."""
    return (
        spark.range(rows)
        .withColumn("trip_id", F.format_string("trip-%09d", F.col("id")))
        .withColumn(
            "day", F.expr("date_format(date_add('2024-01-01', cast(id % 30 as int)), 'yyyy-MM-dd')")
        )
        .withColumn("fare", F.round(F.rand(7) * 80 + 3, 2))
        .withColumn("ts", F.lit(1).cast("long"))
        .drop("id")
    )


def mixed(spark: SparkSession, n: int, rows: int) -> DataFrame:
    """``n`` rows: half updates of stored trips (some moving day), half new trips."""
    return (
        spark.range(n)
        .withColumn(
            "k",
            F.when(F.col("id") % 2 == 0, F.col("id") * 37 % rows).otherwise(rows + F.col("id")),
        )
        .withColumn("trip_id", F.format_string("trip-%09d", F.col("k")))
        .withColumn(
            "day", F.expr("date_format(date_add('2024-01-01', cast(k % 29 as int)), 'yyyy-MM-dd')")
        )
        .withColumn("fare", F.lit(99.5))
        .withColumn("ts", F.lit(2).cast("long"))
        .drop("id", "k")
    )


def main() -> None:
    args = parse_args()
    with progress_bars(wanted()):  # on a terminal: rich bars of long steps (writers.cli.progress)
        run(args)


def run(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    # no Spark console bars: quiet off a terminal, and on one the steps' own bars show (two
    # live displays on one stderr garble each other)
    quiet = {"spark.ui.showConsoleProgress": "false"}
    spark = step("start Spark", lambda: embedded_session("lakebraid-demo", conf=quiet))
    spark.sparkContext.setLogLevel("ERROR")
    shutil.rmtree(args.path, ignore_errors=True)
    Path(args.path).parent.mkdir(parents=True, exist_ok=True)
    client = WriteClient.create(
        args.path,
        record_key="trip_id",
        partition_by=["day"],
        precombine="ts",
        spark=spark,
        **{"index.expected.records": args.rows, "write.target.file.rows": 200_000},
    )
    print(f"created table {client.path}")
    data = trips(spark, args.rows)
    first = step(f"bulk insert {args.rows:,} trips", lambda: client.bulk_insert(data))
    n = max(10, args.rows // 100)
    changes = mixed(spark, n, args.rows)
    label = f"upsert {n:,} rows (half updates, some moving day; half new)"
    second = step(label, lambda: client.upsert(changes))
    doomed = [f"trip-{i:09d}" for i in range(1, args.rows, max(1, args.rows // 1000))][:1000]
    third = step(f"delete {len(doomed):,} keys", lambda: client.delete(doomed))
    for kind in TimelineKind:
        print(format_timeline(client.table, kind))
    first_done = next(i.completion_time for i in client.timeline() if i.time == first)
    show_reads(client, first_done, args.rows)
    before = step("count rows as of the bulk insert", lambda: client.read(as_of=first_done).count())
    now = step("count rows now", lambda: client.read().count())
    where = "day = '2024-01-05' and fare > 50"
    files = len(client.file_paths(where=where))
    total = len(client.file_paths(where=None))
    hits = step(f"read where {where}", lambda: client.read(where=where).count())
    print(
        f"rows as of {first}: {before:,}; now: {now:,}; filtered: {hits:,} "
        f"(read {files} of {total} files); commits {first}, {second}, {third}"
    )
    print(format_history(client.history(), client.path))
    print(format_show(client.show()))
    print(f"demo finished in {time.perf_counter() - started:.1f} s")
    spark.stop()


def show_reads(client: WriteClient, first_done: str | None, rows: int) -> None:
    """Look up a few keys as of the bulk insert and now."""
    probe = ["trip-000000000", "trip-000000001", f"trip-{rows + 1:09d}"]
    for label, as_of in (("after the bulk insert", first_done), ("now", None)):
        found = step(
            f"look up {len(probe)} keys as of {label}",
            lambda a=as_of: client.lookup(probe, as_of=a),
        )
        for key, where in found.items():
            print(f"   {key}: {where.partition + ' ' + where.file_id if where else 'absent'}")


if __name__ == "__main__":
    main()
