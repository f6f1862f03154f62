"""``make demo``: the whole story on embedded defaults (local Spark, local files).

Generates trips with Spark (default 1,000,000 over 30 days), then: create a table, bulk insert,
upsert a mixed batch (updates, new keys, keys moving to another day, duplicates), delete some
keys, print the three timelines, look keys up as of two instants, read as of the first instant
and now (with data skipping), print the time of every step, then ``lakebraid history`` and
``lakebraid show`` of the table. On a terminal, steps past 2 s draw progress bars (rich).

``make demo-s3`` (``--s3``): the same on an ``s3://<new bucket>/trips`` table on a loopback S3
server (moto behind the counting proxy of ``writers.cli.loopback_s3``, its log in
``loopback-s3/`` beside ``--path``); the AWS environment variables point at it before Spark
starts, and each step also prints the requests it made, by kind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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

try:  # --s3's server needs moto and boto3: the test extra, which make installs
    from lakebraid.writers.cli.loopback_s3 import Counting, LoopbackS3
except ImportError:
    Counting = LoopbackS3 = None  # type: ignore[assignment,misc]

T = TypeVar("T")
KINDS = ("LIST", "HEAD", "GET", "PUT", "DELETE", "POST")


def step(label: str, work: Callable[[], T], server: LoopbackS3 | None = None) -> T:
    """Run one step, printing its time and, given the loopback ``server`` the table lives
    on, the requests it made by kind."""
    print(f"-> {label} ...", flush=True)
    started = time.perf_counter()
    with progress.task(label), counting(server) as requests:  # spinner past 2 s on a terminal
        result = work()
    print(f"   {label}: {time.perf_counter() - started:.2f} s", flush=True)
    if requests is not None:
        kinds = ", ".join(f"{kind} {requests.counts[kind]}" for kind in KINDS)
        print(f"   requests: {requests.total:,} ({kinds})", flush=True)
    return result


@contextmanager
def counting(server: LoopbackS3 | None) -> Iterator[Counting | None]:
    """``server.counting()``, or None without a server."""
    if server is None:
        yield None
        return
    with server.counting() as requests:
        yield requests


@contextmanager
def s3_server(args: argparse.Namespace) -> Iterator[LoopbackS3 | None]:
    """With ``--s3``: a loopback S3 server (log under ``--path``'s folder) that the AWS
    environment variables point at, for this process and the Spark it starts; else None."""
    if not args.s3:
        yield None
        return
    log_dir = Path(args.path).parent / "loopback-s3"
    log_dir.mkdir(parents=True, exist_ok=True)
    with LoopbackS3(log_dir) as server:
        os.environ.update(server.environment())
        print(f"loopback S3 server at {server.endpoint} (moto log {server.log_path})")
        yield server


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
    parser.add_argument(
        "--s3",
        action="store_true",
        help="the table on a loopback S3 server (s3://<new bucket>/trips), requests per step",
    )
    args = parser.parse_args()
    if args.rows < 10:
        parser.error("--rows must be at least 10")
    if args.s3 and LoopbackS3 is None:
        parser.error("--s3 needs moto and boto3: pip install 'lakebraid[test]'")
    problem = None if args.s3 else replace_problem(Path(args.path))
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
    # on a terminal: rich bars of long steps (writers.cli.progress)
    with progress_bars(wanted()), s3_server(args) as server:
        run(args, server)


def run(args: argparse.Namespace, server: LoopbackS3 | None = None) -> None:
    """The demo on a table at ``--path``, or in a new bucket on ``server``."""
    started = time.perf_counter()
    # no Spark console bars: quiet off a terminal, and on one the steps' own bars show (two
    # live displays on one stderr garble each other)
    quiet = {"spark.ui.showConsoleProgress": "false"}
    spark = step("start Spark", lambda: embedded_session("lakebraid-demo", conf=quiet))
    spark.sparkContext.setLogLevel("ERROR")
    client = create_table(args, spark, server)
    data = trips(spark, args.rows)
    first = step(f"bulk insert {args.rows:,} trips", lambda: client.bulk_insert(data), server)
    n = max(10, args.rows // 100)
    changes = mixed(spark, n, args.rows)
    label = f"upsert {n:,} rows (half updates, some moving day; half new)"
    second = step(label, lambda: client.upsert(changes), server)
    doomed = [f"trip-{i:09d}" for i in range(1, args.rows, max(1, args.rows // 1000))][:1000]
    third = step(f"delete {len(doomed):,} keys", lambda: client.delete(doomed), server)
    for kind in TimelineKind:
        print(format_timeline(client.table, kind))
    first_done = next(i.completion_time for i in client.timeline() if i.time == first)
    show_reads(client, first_done, args.rows, server)
    label = "count rows as of the bulk insert"
    before = step(label, lambda: client.read(as_of=first_done).count(), server)
    now = step("count rows now", lambda: client.read().count(), server)
    where = "day = '2024-01-05' and fare > 50"
    files = len(client.file_paths(where=where))
    total = len(client.file_paths(where=None))
    hits = step(f"read where {where}", lambda: client.read(where=where).count(), server)
    print(
        f"rows as of {first}: {before:,}; now: {now:,}; filtered: {hits:,} "
        f"(read {files} of {total} files); commits {first}, {second}, {third}"
    )
    print(format_history(client.history(), client.path))
    print(format_show(client.show()))
    print(f"demo finished in {time.perf_counter() - started:.1f} s")
    spark.stop()


def create_table(
    args: argparse.Namespace, spark: SparkSession, server: LoopbackS3 | None
) -> WriteClient:
    """The demo table: at ``--path`` (replacing a previous demo table), or with ``server``
    at ``s3://<new bucket>/trips``."""
    if server is None:
        url = args.path
        shutil.rmtree(url, ignore_errors=True)
        Path(url).parent.mkdir(parents=True, exist_ok=True)
    else:
        url = f"s3://{server.new_bucket()}/trips"
    options = {"index.expected.records": args.rows, "write.target.file.rows": 200_000}

    def create() -> WriteClient:
        return WriteClient.create(url, "trip_id", ["day"], "ts", spark=spark, **options)

    client = step("create table", create, server)
    print(f"created table {url}")
    return client


def show_reads(
    client: WriteClient, first_done: str | None, rows: int, server: LoopbackS3 | None
) -> None:
    """Look up a few keys as of the bulk insert and now."""
    probe = ["trip-000000000", "trip-000000001", f"trip-{rows + 1:09d}"]
    for label, as_of in (("after the bulk insert", first_done), ("now", None)):
        found = step(
            f"look up {len(probe)} keys as of {label}",
            lambda a=as_of: client.lookup(probe, as_of=a),
            server,
        )
        for key, where in found.items():
            print(f"   {key}: {where.partition + ' ' + where.file_id if where else 'absent'}")


if __name__ == "__main__":
    main()
