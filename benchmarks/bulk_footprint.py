"""The record index a bulk insert leaves on disk (issue 14 item 4): a new table takes one
``bulk_insert`` of ``--rows`` rows keyed by random UUID4s (30 day partitions, default options:
inline compaction and cleaning on), with *commit bases* on (a group that holds no file gets
its entries as a base file, no log) and, as the baseline in the same run, off (a log per group
that the inline compaction then folds into a base). Printed per run: the bulk insert's seconds
and the record_index partition's bytes on disk per entry, counting every file in it; a lookup
of 10,000 of the keys checks the index. Run from the repo root::

    .venv/bin/python benchmarks/bulk_footprint.py --rows 10000000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from benchlib import Report  # noqa: E402
from record_index import uuid4_strings  # noqa: E402

from lakebraid.index.lookup import lookup  # noqa: E402
from lakebraid.writers.client import WriteClient  # noqa: E402

DAYS = 30


def folder_bytes(path: str) -> tuple[int, int]:
    names = os.listdir(path) if os.path.isdir(path) else []
    return len(names), sum(os.path.getsize(os.path.join(path, n)) for n in names)


def one(folder: str, rows: pa.Table, commit_bases: bool) -> tuple[float, float, int, str]:
    """(seconds, bytes per entry, files, check) of a bulk insert into a new table."""
    path = f"{folder}/{'bases' if commit_bases else 'logs'}"
    options = {"metadata.record_index.commit.bases": commit_bases}
    client = WriteClient.create(path, "id", ["day"], "ts", **options)
    start = time.perf_counter()
    client.bulk_insert(rows)
    seconds = time.perf_counter() - start
    files, size = folder_bytes(f"{path}/.braid/metadata/record_index")
    probe = rows.column("id").slice(0, 10_000)
    found = lookup(client.metadata.reader(), probe)
    check = "OK" if found.num_rows == len(probe) else f"FAIL: {found.num_rows} found"
    return seconds, size / rows.num_rows, files, check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--dir", default=None, help="parent folder of the temporary tables")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    n = args.rows
    rows = pa.table(
        {
            "id": uuid4_strings(n, rng),
            "day": pa.array([f"2026-11-{1 + d:02d}" for d in rng.integers(0, DAYS, n)]),
            "ts": np.arange(n, dtype=np.int64),
            "amount": rng.random(n),
        }
    )
    report = Report(
        "footprint",
        f"one bulk insert of {n:,} rows keyed by random UUID4s into a new table, {DAYS} days",
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="lakebraid-fp-", dir=args.dir) as folder:
        for bases in (True, False):
            results[bases] = one(folder, rows, bases)
            seconds, per_entry, files, check = results[bases]
            label = "commit bases" if bases else "logs + compaction (baseline)"
            print(
                f"[{label}] bulk insert {seconds:.2f} s; record_index {per_entry:.2f} B/entry "
                f"in {files} files; lookup check {check}",
                flush=True,
            )
    on, off = results[True], results[False]
    report.add(
        f"record_index B/entry after a bulk insert of {n:,} UUID keys (every file)",
        "B/entry",
        {"lakebraid": on[1]},
        f"{on[3]}; {on[2]} files; with logs + compaction: {off[1]:.2f} B/entry, {off[2]} files",
    )
    report.add(
        f"bulk insert {n:,} rows, new table",
        "s",
        {"lakebraid": on[0]},
        f"with logs + compaction: {off[0]:.2f} s ({off[0] / on[0]:.2f}x)",
    )
    report.notes.append(
        "footprint: bytes = every file in .braid/metadata/record_index after the write and its "
        "inline services; baseline = metadata.record_index.commit.bases=false in the same run"
    )
    report.print()
    report.save(args.json)
    return 0 if on[3] == off[3] == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
