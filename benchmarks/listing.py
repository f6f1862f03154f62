"""Listing the files of a table of 5,000 partitions: lakebraid's metadata table (``files``)
beside listing storage, delta-rs's log and pyiceberg's manifests, same data, same run.

The table: ``--partitions`` (default 5,000) partitions of ``--rows-per-partition`` rows (4),
written in one write per system, so one small Parquet file per partition; the write is timed
in ``--write-runs`` rounds (default 3, the median reported) after one untimed round, each
round writing every system into a fresh folder, a different system first each round; its CPU
seconds (user + system of the process, every thread: ``benchlib.cpu_timed``) are reported
too, since the wall time of creating 10,000 inodes moves severalfold with the disk's
state. Then, each run opening the table afresh with lakebraid's and pyiceberg's in-process
caches cleared (the OS page cache stays warm; the median of ``--runs`` runs after one untimed
run):

* lakebraid from metadata: ``WriteClient.open(path).files()`` (opens the table, reads the
  timelines and the ``files`` partition of the metadata table);
* lakebraid from storage: ``fs.find`` of the table folder with fsspec's local file system
  (the one lakebraid uses for local paths), ``.braid/`` left out -- the listing the metadata
  table replaces (Hudi RFC-15). It is a lower bound: it finds every file version and would
  still need the timeline to choose;
* delta-rs: ``DeltaTable(path).file_uris()`` (reads the log);
* pyiceberg: ``catalog.load_table(name).scan().plan_files()`` (metadata JSON, manifest list,
  manifests);
and the same for one partition (lakebraid ``files(partition)``, delta-rs
``file_uris(file_pruning_predicate=...)``, pyiceberg ``plan_files`` with a row filter). Every
listing is checked to find the expected number of files.

    .venv/bin/python benchmarks/listing.py [--partitions N] [--runs R] [--write-runs W]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from collections.abc import Callable

import fsspec
import numpy as np
import pyarrow as pa
from benchlib import (
    Report,
    cpu_timed,
    iceberg_catalog,
    iceberg_table,
    in_turn,
    measure,
    ratio,
)
from deltalake import DeltaTable, write_deltalake
from pyiceberg.expressions import EqualTo

from lakebraid.timeline.layout import BRAID_DIR
from lakebraid.writers.client import WriteClient

STORAGE = "lakebraid from storage"


def make_rows(partitions: int, per_partition: int, seed: int = 5) -> pa.Table:
    n = partitions * per_partition
    rng = np.random.default_rng(seed)
    part = np.arange(n) % partitions
    return pa.table(
        {
            "id": pa.array([f"row-{i:09d}" for i in range(n)], pa.string()),
            "part": pa.array([f"p{p:05d}" for p in part.tolist()], pa.string()),
            "ts": pa.array(np.ones(n, dtype=np.int64)),
            "value": pa.array(rng.random(n)),
        }
    )


class Systems:
    """The three tables of the same rows, and a lister per (system, scope)."""

    def __init__(self, folder: str, rows: pa.Table, one: str):
        self.lake = f"{folder}/lakebraid"
        self.delta = f"{folder}/delta"
        self.catalog = iceberg_catalog(f"{folder}/iceberg")
        self.one = one  # the partition value listed alone
        self.rows = rows
        self.fs = fsspec.filesystem("file")  # lakebraid's file system for local paths
        self.iceberg = ""  # the table's name, once written

    def write(self, first: int = 0) -> dict[str, tuple[float, float]]:
        """(wall, CPU) seconds of each system's write of the rows (``benchlib.cpu_timed``),
        the systems in turn starting with the ``first``-th (rounds rotate it: no system always
        writes first)."""
        WriteClient.create(self.lake, "id", ["part"], "ts")
        table = iceberg_table(self.catalog, "listing", self.rows.schema, ["part"])
        self.iceberg = table.name()
        writes: list[tuple[str, Callable[[], object]]] = [
            ("lakebraid", lambda: WriteClient.open(self.lake).bulk_insert(self.rows)),
            ("delta-rs", lambda: write_deltalake(self.delta, self.rows, partition_by=["part"])),
            ("pyiceberg", lambda: self.catalog.load_table(self.iceberg).append(self.rows)),
        ]
        return {system: cpu_timed(write)[1:] for system, write in in_turn(writes, first)}

    def listers(self, partition: bool) -> dict[str, Callable[[], int]]:
        """Listings of the whole table (or of one partition) by system, each returning the
        number of files found; :data:`STORAGE` is lakebraid's walk of the table folder."""
        if partition:
            return {
                "lakebraid": self.lake_metadata_one,
                "delta-rs": self.delta_log_one,
                "pyiceberg": self.iceberg_plan_one,
                STORAGE: self.lake_storage_one,
            }
        return {
            "lakebraid": self.lake_metadata,
            "delta-rs": self.delta_log,
            "pyiceberg": self.iceberg_plan,
            STORAGE: self.lake_storage,
        }

    # ---- all files -------------------------------------------------------------------------
    def lake_metadata(self) -> int:
        return sum(len(files) for files in WriteClient.open(self.lake).files().values())

    def lake_storage(self) -> int:
        braid = f"/{BRAID_DIR}/"
        found = self.fs.find(self.lake)
        return sum(1 for p in found if p.endswith(".parquet") and braid not in p)

    def delta_log(self) -> int:
        return len(DeltaTable(self.delta).file_uris())

    def iceberg_plan(self) -> int:
        return len(list(self.catalog.load_table(self.iceberg).scan().plan_files()))

    # ---- one partition ---------------------------------------------------------------------
    def lake_metadata_one(self) -> int:
        files = WriteClient.open(self.lake).files(partition=f"part={self.one}")
        return sum(len(f) for f in files.values())

    def lake_storage_one(self) -> int:
        found = self.fs.find(f"{self.lake}/part={self.one}")
        return sum(1 for p in found if p.endswith(".parquet"))

    def delta_log_one(self) -> int:
        return len(DeltaTable(self.delta).file_uris(file_pruning_predicate=f"part = '{self.one}'"))

    def iceberg_plan_one(self) -> int:
        scan = self.catalog.load_table(self.iceberg).scan(row_filter=EqualTo("part", self.one))
        return len(list(scan.plan_files()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--partitions", type=int, default=5_000)
    parser.add_argument("--rows-per-partition", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5, help="runs per listing (median)")
    parser.add_argument(
        "--write-runs", type=int, default=3, help="rounds of the writes (median), fresh folders"
    )
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    n = args.partitions
    rows = make_rows(n, args.rows_per_partition)
    folder = tempfile.mkdtemp(prefix="lakebraid-listing-")
    try:
        one = f"p{n // 2:05d}"
        print(f"writing {n:,} partitions x {args.rows_per_partition} rows", flush=True)
        # an untimed round first: every system writes once, so the first timed write does
        # not meet alone what the previous benchmark's deletions left the file system doing
        Systems(f"{folder}/warmup", rows, one).write()
        rounds = [Systems(f"{folder}/round{k}", rows, one) for k in range(args.write_runs)]
        samples = [each.write(first=k) for k, each in enumerate(rounds)]
        writes = {name: statistics.median(s[name][0] for s in samples) for name in samples[0]}
        cpus = {name: statistics.median(s[name][1] for s in samples) for name in samples[0]}
        print(f"  writes (wall, CPU seconds): {samples}", flush=True)
        systems = rounds[0]  # the tables listed
        report = Report(
            "listing",
            f"{n:,} partitions x 1 file of {args.rows_per_partition} rows ({len(rows):,} rows)",
            notes=[
                f"listing: the write is the median of {args.write_runs} rounds after one "
                "untimed round, each writing every system into a fresh folder in turn, a "
                "different system first each round (nothing deleted until the end: this file "
                "system creates files slower for a while after large deletions, which the "
                "untimed round meets instead of the first timed write)",
                "listing: median of "
                f"{args.runs} runs, each opening the table afresh with in-process caches "
                "cleared (OS page cache warm); on local disk, where listing folders is cheap "
                "(an object store answers one LIST request per folder or per 1,000 keys)",
                "listing: lakebraid 'from storage' is fsspec find() of the table folder minus "
                ".braid/ and has no peer column: delta-rs and pyiceberg read their log / "
                "manifests like lakebraid's metadata row",
            ],
        )
        spread = "; ".join(
            f"{name} " + " / ".join(f"{s[name][0]:.2f}" for s in samples) for name in samples[0]
        )
        report.add(f"write {n:,} partitions (one write)", "s", writes, f"rounds: {spread}")
        report.add("CPU seconds of that write (user + system, every thread)", "s", cpus)
        checks = []
        for scope, want, partition in ((f"{n:,} files", n, False), ("1 partition", 1, True)):
            print(f"list {scope}", flush=True)
            seconds, check = measure(systems.listers(partition), args.runs, want)
            walk = seconds.pop(STORAGE)
            report.add(f"list {scope} from metadata", "s", seconds, check)
            versus = f"{check}; storage / metadata {ratio(walk, seconds['lakebraid'])}"
            report.add(f"list {scope} from storage (fs.find)", "s", {"lakebraid": walk}, versus)
            checks.append(check)
        report.print()
        report.save(args.json)
        return 0 if all(c == "OK" for c in checks) else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
