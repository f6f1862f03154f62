"""Data skipping: a filtered read that needs 1% of the files beside a full scan and filter,
on lakebraid, delta-rs and pyiceberg, same data, same run.

The table: ``--rows`` rows (default 2,000,000), unpartitioned, written as ``--files`` (100)
appends of equal batches in ``event_time`` order (as events arrive), so each append is one
file holding one ``event_time`` range -- lakebraid with ``write.target.file.rows`` = batch
size, so every append opens a new file group. The systems take turns append by append (the
first rotating), so the sum of each one's appends meets the same machine; their CPU seconds
(user + system, every thread: ``benchlib.cpu_timed``) are summed beside them. The filter
``event_time >= a and event_time < b`` matches exactly one batch: 1% of the rows and of the
files. Each run opens the table afresh with in-process caches cleared (OS page cache warm);
the median of ``--runs`` runs (default 7: a filtered read of 10-40 ms varies by a few ms from
run to run on 2 cores, for every system) after one untimed run of each (``benchlib.measure``):

* lakebraid, in-process (pyarrow, like the peers): ``read_arrow(filters=...)`` (the ``files``
  listing pruned with ``column_stats``, the files left read and filtered), versus
  ``read_arrow()`` of every file then filtered;
* lakebraid on Spark: ``read(where=...).count()`` versus ``read().where(...).count()`` (the
  session is started before timing; Spark itself still prunes row groups by Parquet footers);
* delta-rs: ``to_pyarrow_table(filters=...)`` (prunes files by the log's statistics) versus
  ``to_pyarrow_table()`` then filtered;
* pyiceberg: ``scan(row_filter=...).to_arrow()`` (prunes by manifest metrics) versus
  ``scan().to_arrow()`` then filtered.
Two floors of lakebraid's appends run in the same rotation, each on a table of its own: every
fsync skipped (``os.fsync`` a no-op while those appends run, as delta-rs writes local files
without one; the check counts the fsyncs skipped), and the inline cleaner and archival off
(``clean.inline``, ``archive.inline``: delta-rs's appends neither vacuum nor archive; the
metadata table's compaction stays on, as lookups need it). Each floor's ratio is the best the
appends could reach if that part of a commit cost nothing.
Files read by each filtered read are counted apart (lakebraid: the paths it reads; delta-rs:
``file_uris(file_pruning_predicate=...)``; pyiceberg: ``plan_files()``), and every read is
checked to return the same rows (count and ``event_time`` sum).

    .venv/bin/python benchmarks/skipping.py [--rows N] [--files F] [--runs R] [--no-spark]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from benchlib import (
    Report,
    Value,
    cpu_timed,
    iceberg_catalog,
    iceberg_table,
    in_turn,
    measure,
)
from deltalake import DeltaTable, write_deltalake
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

from lakebraid.writers.client import WriteClient

EPOCH = 1_700_000_000  # event_time of row 0, in seconds
NO_FSYNC = "floor: every fsync skipped"  # the appends' floors, each on a table of its own
NO_SERVICES = "floor: inline clean and archival off"
FLOORS = {NO_FSYNC: "no-fsync", NO_SERVICES: "no-services"}  # and their tables' folders
SERVICES_OFF = {"clean.inline": False, "archive.inline": False}


def batches(rows: int, files: int, seed: int = 11) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    size = rows // files
    out = []
    for b in range(files):
        ids = np.arange(b * size, (b + 1) * size)
        out.append(
            pa.table(
                {
                    "id": pa.array([f"ev-{i:010d}" for i in ids.tolist()], pa.string()),
                    "event_time": pa.array(EPOCH + ids, pa.int64()),
                    "kind": pa.array(rng.choice(["view", "click", "buy"], size).tolist()),
                    "value": pa.array(rng.random(size)),
                }
            )
        )
    return out


def summary(table: pa.Table) -> tuple[int, int]:
    return table.num_rows, int(pc.sum(table.column("event_time")).as_py() or 0)


class Tables:
    """The same appends on the three systems, and their reads."""

    def __init__(self, folder: str, lo: int, hi: int):
        self.lake = f"{folder}/lakebraid"
        self.delta = f"{folder}/delta"
        self.catalog = iceberg_catalog(f"{folder}/iceberg")
        self.lo, self.hi = lo, hi
        self.where = f"event_time >= {lo} and event_time < {hi}"
        self.arrow = (pc.field("event_time") >= lo) & (pc.field("event_time") < hi)
        self.iceberg = ""  # the table's name, once written
        self.spark: Any = None  # a SparkSession, once started
        self.fsyncs_skipped = 0  # by the no-fsync floor's appends

    def write(self, parts: list[pa.Table]) -> tuple[dict[str, float], dict[str, float]]:
        """Wall and CPU seconds of all appends per system (``benchlib.cpu_timed``; tables
        created beforehand), the systems taking turns append by append, the first rotating, so
        that a drift of the machine's speed (or of what creating a file costs: ``small_files``)
        touches them alike."""
        size = parts[0].num_rows
        options = {"write.target.file.rows": size, "index.expected.records": size * len(parts)}
        WriteClient.create(self.lake, "id", [], None, **options)
        self.iceberg = iceberg_table(self.catalog, "skipping", parts[0].schema).name()
        for folder in FLOORS.values():
            WriteClient.create(f"{self.lake}-{folder}", "id", [], None, **options)
        appends: dict[str, Callable[[pa.Table], object]] = {
            "lakebraid": lambda t: WriteClient.open(self.lake).bulk_insert(t),
            "delta-rs": lambda t: write_deltalake(self.delta, t, mode="append"),
            "pyiceberg": lambda t: self.catalog.load_table(self.iceberg).append(t),
            NO_FSYNC: self.skipping_fsyncs,
            NO_SERVICES: lambda t: WriteClient.open(
                f"{self.lake}-{FLOORS[NO_SERVICES]}", **SERVICES_OFF
            ).bulk_insert(t),
        }
        systems = list(appends)
        seconds, cpu = dict.fromkeys(systems, 0.0), dict.fromkeys(systems, 0.0)
        for n, part in enumerate(parts):  # round by round, the first system rotating
            for system in in_turn(systems, n):
                _, wall, used = cpu_timed(partial(appends[system], part))
                seconds[system] += wall
                cpu[system] += used
        for system, total in seconds.items():
            spent = f"{total:.1f} s ({cpu[system]:.1f} s CPU)"
            print(f"  {system}: {len(parts)} appends in {spent}", flush=True)
        return seconds, cpu

    def skipping_fsyncs(self, rows: pa.Table) -> None:
        """An append to the no-fsync floor's table with ``os.fsync`` a no-op meanwhile."""
        real = os.fsync

        def skipped(fd: int) -> None:
            self.fsyncs_skipped += 1

        os.fsync = skipped
        try:
            WriteClient.open(f"{self.lake}-{FLOORS[NO_FSYNC]}").bulk_insert(rows)
        finally:
            os.fsync = real

    # ---- filtered reads, and the files they read --------------------------------------------
    def lake_filtered(self) -> tuple[int, int]:
        filters = [("event_time", ">=", self.lo), ("event_time", "<", self.hi)]
        return summary(WriteClient.open(self.lake).read_arrow(filters=filters))

    def delta_filtered(self) -> tuple[int, int]:
        filters = [("event_time", ">=", self.lo), ("event_time", "<", self.hi)]
        return summary(DeltaTable(self.delta).to_pyarrow_table(filters=filters))

    def iceberg_filtered(self) -> tuple[int, int]:
        table = self.catalog.load_table(self.iceberg)
        return summary(table.scan(row_filter=self.iceberg_filter()).to_arrow())

    def iceberg_filter(self) -> And:
        return And(GreaterThanOrEqual("event_time", self.lo), LessThan("event_time", self.hi))

    def files_read(self) -> dict[str, Value]:
        predicate = f"event_time >= {self.lo} AND event_time < {self.hi}"
        scan = self.catalog.load_table(self.iceberg).scan(row_filter=self.iceberg_filter())
        return {
            "lakebraid": len(WriteClient.open(self.lake).file_paths(where=self.where)),
            "delta-rs": len(DeltaTable(self.delta).file_uris(file_pruning_predicate=predicate)),
            "pyiceberg": len(list(scan.plan_files())),
        }

    # ---- full scans, then the filter -------------------------------------------------------
    def lake_full(self) -> tuple[int, int]:
        return summary(WriteClient.open(self.lake).read_arrow().filter(self.arrow))

    def delta_full(self) -> tuple[int, int]:
        return summary(DeltaTable(self.delta).to_pyarrow_table().filter(self.arrow))

    def iceberg_full(self) -> tuple[int, int]:
        return summary(self.catalog.load_table(self.iceberg).scan().to_arrow().filter(self.arrow))

    # ---- Spark (lakebraid only) -------------------------------------------------------------
    def spark_filtered(self) -> tuple[int, int]:
        frame = WriteClient.open(self.lake, self.spark).read(where=self.where)
        return spark_summary(frame)

    def spark_full(self) -> tuple[int, int]:
        frame = WriteClient.open(self.lake, self.spark).read().where(self.where)
        return spark_summary(frame)

    def start_spark(self) -> None:
        client = WriteClient.open(self.lake)
        self.spark = client.spark
        client.read().limit(1).collect()  # JVM, session and first job outside the timing


def spark_summary(frame: Any) -> tuple[int, int]:
    row = frame.selectExpr("count(*) as n", "sum(event_time) as s").collect()[0]
    return int(row["n"]), int(row["s"] or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--runs", type=int, default=7, help="runs per read (median)")
    parser.add_argument("--no-spark", action="store_true", help="leave out the Spark reads")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    parts = batches(args.rows, args.files)
    size = parts[0].num_rows
    pick = int(args.files * 0.37)  # the batch the filter selects
    lo = EPOCH + pick * size
    want = summary(parts[pick])
    folder = tempfile.mkdtemp(prefix="lakebraid-skipping-")
    try:
        tables = Tables(folder, lo, lo + size)
        print(f"writing {args.files} appends of {size:,} rows", flush=True)
        writes, cpus = tables.write(parts)
        report = Report(
            "skipping",
            f"{size * args.files:,} rows in {args.files} appends (files) in event_time order; "
            f"filter: {tables.where}",
            notes=[
                f"skipping: median of {args.runs} runs, each opening the table afresh with "
                "in-process caches cleared (OS page cache warm); a read = list + prune + read "
                "Parquet into Arrow + filter rows",
                "skipping: lakebraid in-process = read_arrow(filters=...) (delta-rs: "
                "to_pyarrow_table(filters=...)); Spark rows = read(...).count() and sum on a "
                "warm local[*] session",
                "skipping: floor rows = lakebraid's appends (the lakebraid column) on a table of "
                "their own in the same rotation, one part of a commit removed: every fsync "
                "skipped (not durable, as delta-rs's local writes), or the inline cleaner and "
                "archival off; their ratio is the best the appends could reach if that part cost "
                "nothing",
            ],
        )
        systems = {k: v for k, v in writes.items() if k not in FLOORS}
        report.add(f"write {args.files} appends of {size:,} rows", "s", systems)
        used = {k: v for k, v in cpus.items() if k not in FLOORS}
        report.add("CPU seconds of those appends (user + system, every thread)", "s", used)
        skipped = f"{tables.fsyncs_skipped:,} fsyncs skipped"
        for floor, check in ((NO_FSYNC, skipped), (NO_SERVICES, "")):
            floor_s = {"lakebraid": writes[floor], "delta-rs": writes["delta-rs"]}
            report.add(f"{floor}, {args.files} appends", "s", floor_s, check)
        print("filtered reads", flush=True)
        reads = {
            "lakebraid": tables.lake_filtered,
            "delta-rs": tables.delta_filtered,
            "pyiceberg": tables.iceberg_filtered,
        }
        filtered, check = measure(reads, args.runs, want)
        report.add("filtered read, 1% of files", "s", filtered, check)
        files = tables.files_read()
        files_check = "OK" if all(v == 1 for v in files.values()) else "more than 1 file"
        report.add("files read by the filtered read", "files", files, files_check)
        print("full scans", flush=True)
        reads = {
            "lakebraid": tables.lake_full,
            "delta-rs": tables.delta_full,
            "pyiceberg": tables.iceberg_full,
        }
        full, full_check = measure(reads, args.runs, want)
        report.add(f"full scan of {args.files} files + filter", "s", full, full_check)
        checks = [check, full_check]
        if not args.no_spark:
            print("Spark reads (lakebraid)", flush=True)
            tables.start_spark()
            spark = {"filtered": tables.spark_filtered, "full": tables.spark_full}
            spark_s, spark_check = measure(spark, args.runs, want)
            report.add(
                "Spark read(where=), pruned", "s", {"lakebraid": spark_s["filtered"]}, spark_check
            )
            report.add(
                "Spark read().where(), all files", "s", {"lakebraid": spark_s["full"]}, spark_check
            )
            checks.append(spark_check)
        report.print()
        report.save(args.json)
        return 0 if all(c == "OK" for c in checks) else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
