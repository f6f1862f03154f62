"""Secondary index: a point read by a non-key column, with the index against a full scan that
column statistics cannot prune, same table, same run.

The table: ``--rows`` rows (default 10,000,000) in 30 day partitions, bulk-inserted in files of
``--file-rows`` rows (100,000), columns ``id`` (the record key), ``day``, ``ts``, ``user`` (a
random integer in ``[0, rows)``, so every file's ``user`` range spans almost everything and
column statistics prune nothing) and ``amount``. ``create_index("user")`` builds the index on
the live table (timed). Then ``user = v`` for a present value, in process (pyarrow), caches
cleared before every run (OS page cache warm), median of ``--runs`` after one untimed run:

* with the index: the files the read plan keeps (value -> record keys -> record index -> file
  groups, then column statistics), read with ``read_arrow_files`` and filtered;
* column statistics only: the same plan without the index (every file), read and filtered.

Both reads are checked to return the same rows; the files each opens are counted.

    .venv/bin/python benchmarks/secondary.py [--rows N] [--file-rows F] [--runs R]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from benchlib import Report, measure, timed

from lakebraid.index.column_stats import keep_files
from lakebraid.index.sql_filter import Condition
from lakebraid.writers.client import WriteClient
from lakebraid.writers.read.plan import keep_matching, plan_paths, read_arrow_files, table_schema


def make_rows(rows: int, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = pa.array(np.char.add("id-", np.arange(rows).astype(str)))
    days = pa.array(np.char.add("2026-11-", (1 + rng.integers(0, 30, rows)).astype(str)))
    return pa.table(
        {
            "id": ids,
            "day": days,
            "ts": pa.array(np.arange(rows, dtype=np.int64)),
            "user": pa.array(rng.integers(0, rows, rows, dtype=np.int64)),
            "amount": pa.array(rng.random(rows)),
        }
    )


def folder_bytes(path: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())


def point_read(client: WriteClient, value: int, use_index: bool) -> Callable[[], tuple[int, int]]:
    """A read of ``user = value``: (files opened, rows found)."""
    conditions = [Condition("user", "=", (value,))]
    schema = table_schema(client.schema())

    def stats_only(pairs, reader):
        return keep_files(pairs, reader.column_stats(), conditions)

    keep = keep_matching(conditions, schema) if use_index else stats_only

    def work() -> tuple[int, int]:
        paths = plan_paths(client.table, None, keep)
        rows = read_arrow_files(client.table.fs, paths, client.schema(), "id")
        return len(paths), rows.filter(pc.equal(rows.column("user"), value)).num_rows

    return work


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--file-rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="runs per read (median)")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    report = Report(
        "secondary",
        f"{args.rows:,} rows, 30 day partitions, files of {args.file_rows:,} rows, "
        "index on a random integer column",
    )
    folder = tempfile.mkdtemp(prefix="lakebraid-secondary-")
    try:
        run(args, report, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report.print()
    report.save(args.json)
    return 0


def run(args: argparse.Namespace, report: Report, folder: str) -> None:
    data = make_rows(args.rows)
    options = {
        "index.expected.records": args.rows,
        "write.target.file.rows": args.file_rows,
        "write.small.file.rows": 0,
    }
    client = WriteClient.create(f"{folder}/t", "id", ["day"], "ts", **options)
    _, insert = timed(lambda: client.bulk_insert(data))
    print(f"bulk insert: {insert:.1f} s, {len(client.file_paths())} files", flush=True)
    _, build = timed(lambda: client.create_index("user"))
    entries = args.rows
    size = folder_bytes(f"{client.path}/.braid/metadata/secondary_index")
    print(f"index build: {build:.1f} s, {size / entries:.1f} B per entry", flush=True)
    report.add("build the index (live table)", "s", {"lakebraid": build})
    report.add("index bytes per entry", "B", {"lakebraid": round(size / entries, 2)})
    value = int(data.column("user")[args.rows // 2].as_py())
    want = pc.sum(pc.equal(data.column("user"), value)).as_py()
    seconds, check = measure(
        {"index": point_read(client, value, True), "stats": point_read(client, value, False)},
        args.runs,
        None,  # the two results are compared below
    )
    files_index, found = point_read(client, value, True)()
    files_stats, found_stats = point_read(client, value, False)()
    ok = "OK" if found == found_stats == want else f"FAIL: {found}, {found_stats}, {want}"
    report.add(
        f"point read user = v, index ({files_index} files opened)",
        "s",
        {"lakebraid": seconds["index"]},
        ok,
    )
    report.add(
        f"point read user = v, column stats only ({files_stats} files opened)",
        "s",
        {"lakebraid": seconds["stats"]},
        ok,
    )
    del check
    report.notes.append(
        f"point read: {found} row(s); with the index {files_index} of {files_stats} files are "
        f"opened, {float(seconds['stats']) / float(seconds['index']):.1f}x faster"
    )


if __name__ == "__main__":
    raise SystemExit(main())
