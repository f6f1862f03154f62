"""Cost of a write as a table's history grows (issue 14): milliseconds, file-system calls by
kind, and files and bytes on disk, per 100-row upsert at several commit counts.

A 100,000-row table (30 day partitions, default options: inline compaction, cleaning and
archival on) takes one 100-row upsert of random existing keys per commit. The rows keep their
number and their random values over the run, but not quite their size: each row carries the
time of the commit that last wrote it (``_braid_commit_time``), and as upserts spread those over
thousands of commits that column takes more bytes (its dictionary holds up to a value per row:
at commit 5,000 the commit wrote 1.55 MB against 1.49-1.54 MB at commits 1-100). Each
commit's recorded data bytes are printed to show how much of a write's cost is that. At each
commit count asked (``--at``) the next ``--runs`` upserts are measured one by one, each
as a user makes it (``WriteClient.open`` then ``upsert``): the median milliseconds and the
mean (which carries the inline services a write runs when due), the median number of
calls per fsspec method of the local file system (counted by wrapping the methods of
``LocalFileSystem``, so every layer's calls count), and the files and bytes under the table's
folder after them. Figures are printed, never asserted. Run from the repo root::

    .venv/bin/python benchmarks/history.py --at 1,10,100,1000,5000  # make bench (~40 min)
    .venv/bin/python benchmarks/history.py --at 1,100               # a quick look
    .venv/bin/python benchmarks/history.py --s3 --at 1,10,100       # on a loopback S3 server

``--s3``: the table lives in a bucket of a loopback S3 server (moto behind the counting proxy
of ``writers.cli.loopback_s3``); calls are then the requests by kind (LIST, HEAD, GET, PUT,
DELETE, POST) each upsert sent, and files and bytes are those under the table's prefix.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import fsspec  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from benchlib import Report  # noqa: E402
from fsspec.implementations.local import LocalFileSystem  # noqa: E402

from lakebraid.writers.cli.loopback_s3 import LoopbackS3  # noqa: E402
from lakebraid.writers.client import WriteClient  # noqa: E402
from lakebraid.writers.services.history import history  # noqa: E402

ROWS, DAYS, BATCH = 100_000, 30, 100
TS_BASE = 1_000_000  # upserts take ts TS_BASE + commit, above every bulk-inserted ts
COUNTED = ["info", "ls", "exists", "open", "_open", "find", "mv", "rm", "rm_file", "makedirs"]
CALLS: collections.Counter[str] = collections.Counter()
T = TypeVar("T")


def count_calls() -> None:
    """Wrap ``LocalFileSystem``'s methods so every call is counted in :data:`CALLS`."""
    for name in COUNTED:
        original = getattr(LocalFileSystem, name, None)
        if original is None or getattr(original, "_counted", False):
            continue

        def wrapper(self, *args, __name=name, __original=original, **kwargs):
            CALLS[__name] += 1
            return __original(self, *args, **kwargs)

        wrapper._counted = True  # type: ignore[attr-defined]
        setattr(LocalFileSystem, name, wrapper)


def batch(keys: np.ndarray, ts: np.ndarray, rng: np.random.Generator) -> pa.Table:
    return pa.table(
        {
            "id": [f"key-{k:08d}" for k in keys],
            "day": [f"2026-11-{1 + int(k) % DAYS:02d}" for k in keys],
            "ts": ts.astype(np.int64),
            "amount": rng.random(len(keys)) * 1000,
        }
    )


def probe() -> float:
    """Milliseconds of a fixed piece of work that touches no table (median of 5): a 50,000-row
    Parquet round trip in memory and a sort of Python tuples. The machine's speed moves by tens
    of percent over a long run; a mark whose probe moved with its upserts measured the machine,
    not the history."""
    rng = np.random.default_rng(0)
    table = pa.table({"k": rng.permutation(50_000).astype(str), "v": rng.random(50_000)})
    items = [(str(i % 977), i) for i in range(50_000)]
    times = []
    for _ in range(5):
        start = time.perf_counter()
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        pq.read_table(pa.BufferReader(sink.getvalue()))
        sorted(items, reverse=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def disk(path: str) -> tuple[int, int]:
    files = size = 0
    for folder, _, names in os.walk(path):
        for name in names:
            files += 1
            size += os.path.getsize(os.path.join(folder, name))
    return files, size


def local_calls(work: Callable[[], T]) -> tuple[T, collections.Counter[str]]:
    """``work()`` and the LocalFileSystem calls it made, by method."""
    CALLS.clear()
    result = work()
    return result, collections.Counter(CALLS)


def s3_calls(lb: LoopbackS3) -> Callable[[Callable[[], T]], tuple[T, collections.Counter[str]]]:
    """Like :func:`local_calls`, counting the requests ``lb`` answered, by kind."""

    def counted(work: Callable[[], T]) -> tuple[T, collections.Counter[str]]:
        with lb.counting() as counting:
            result = work()
        return result, collections.Counter(counting.counts)

    return counted


def s3_disk(lb: LoopbackS3, url: str) -> tuple[int, int]:
    """Files and bytes under ``url`` (one listing, not counted)."""
    fs = fsspec.filesystem("s3", **lb.storage_options())
    entries = fs.find(url, detail=True).values()
    return len(entries), sum(int(e.get("size") or 0) for e in entries)


class Workload:
    def __init__(self, path: str, seed: int, options: dict[str, Any] | None = None) -> None:
        self.path, self.rng = path, np.random.default_rng(seed)
        self.options = options or {}
        self.counted: Callable[[Callable[[], Any]], tuple[Any, collections.Counter[str]]]
        self.counted = local_calls
        self.commits = 0
        first = batch(np.arange(ROWS), self.rng.integers(0, TS_BASE, ROWS), self.rng)
        WriteClient.create(path, "id", ["day"], "ts", storage_options=self.options or None)
        WriteClient.open(path, storage_options=self.options or None).bulk_insert(first)
        self.commits = 1

    def upsert(self) -> tuple[float, collections.Counter[str], dict[str, int]]:
        """One timed upsert: seconds, fs calls by method, and what its commit recorded
        (data bytes written and milliseconds per phase, from ``lakebraid history``)."""
        keys = self.rng.choice(ROWS, size=BATCH, replace=False)
        data = batch(keys, np.full(BATCH, TS_BASE + self.commits), self.rng)
        options = self.options or None

        def write() -> tuple[WriteClient, str]:
            client = WriteClient.open(self.path, storage_options=options)
            return client, client.upsert(data)

        start = time.perf_counter()
        (client, instant), calls = self.counted(write)
        elapsed = time.perf_counter() - start
        self.commits += 1
        # the newest few: after the commit only its inline services complete (all of history
        # would make building a long history quadratic)
        rows = history(client.table, limit=8)
        if not any(r["time"] == instant for r in rows):
            rows = history(client.table)
        metrics = next(r["metrics"] for r in rows if r["time"] == instant)
        recorded = {"data bytes": metrics["bytes_written"], **metrics["phases_ms"]}
        return elapsed, calls, recorded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--at", default="1,100,1000", help="commit counts to measure at")
    parser.add_argument("--runs", type=int, default=10, help="upserts measured at each")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--dir", default=None, help="parent folder of the temporary table")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument("--s3", action="store_true", help="the table on a loopback S3 server")
    args = parser.parse_args(argv)
    marks = sorted({int(a) for a in args.at.split(",")})
    count_calls()
    with contextlib.ExitStack() as stack:
        lb = stack.enter_context(LoopbackS3()) if args.s3 else None
        folder = stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir))
        return measure(args, marks, folder, lb)


def measure(args: argparse.Namespace, marks: list[int], folder: str, lb: LoopbackS3 | None) -> int:
    """The runs at each mark, printed and reported."""
    where = "a loopback S3 server (moto)" if lb else "local disk"
    report = Report(
        "history-s3" if lb else "history",
        f"{ROWS:,} rows of random values, {DAYS} day partitions on {where}; one {BATCH}-row "
        "upsert of random existing keys per commit, default options (inline services on)",
    )
    if lb is None:
        work = Workload(f"{folder}/t", args.seed)
        disk_of: Callable[[], tuple[int, int]] = partial(disk, work.path)
    else:
        url = f"s3://{lb.new_bucket()}/t"
        work = Workload(url, args.seed, lb.storage_options())
        work.counted = s3_calls(lb)
        disk_of = partial(s3_disk, lb, url)
    unit = "requests" if lb else "calls"
    started = time.perf_counter()
    for mark in marks:
        while work.commits < mark:
            work.upsert()
        before = probe()
        runs = [work.upsert() for _ in range(args.runs)]
        machine = (before + probe()) / 2
        ms = statistics.median(r[0] for r in runs) * 1000
        mean = statistics.mean(r[0] for r in runs) * 1000
        kinds = sorted({k for _, c, _ in runs for k in c})
        calls = {k: statistics.median(c[k] for _, c, _ in runs) for k in kinds}
        recorded = {k: statistics.median(r[2][k] for r in runs) for k in runs[0][2]}
        files, size = disk_of()
        shown = ", ".join(f"{k} {v:g}" for k, v in calls.items())
        phases = ", ".join(f"{k} {v:g}" for k, v in recorded.items())
        print(
            f"[commit {mark:,}] {ms:.0f} ms per upsert (mean {mean:.0f}); {unit} per upsert: "
            f"{shown}; recorded by the commit: {phases}; "
            f"{files:,} files, {size / 2**20:.1f} MiB on disk; machine probe {machine:.1f} ms "
            f"({time.perf_counter() - started:.0f} s so far)",
            flush=True,
        )
        report.add(f"upsert {BATCH} rows at commit {mark:,}", "ms", {"lakebraid": ms})
        report.add(
            f"mean upsert with inline services at commit {mark:,}", "ms", {"lakebraid": mean}
        )
        report.add(
            f"{'requests' if lb else 'fs calls'} per upsert at commit {mark:,}",
            unit,
            {"lakebraid": sum(calls.values())},
            "; ".join(f"{k} {v:g}" for k, v in calls.items()),
        )
        report.add(
            f"commit phases at commit {mark:,} (ms, median)",
            "ms",
            {"lakebraid": sum(v for k, v in recorded.items() if k != "data bytes")},
            "; ".join(f"{k} {v:g}" for k, v in recorded.items()),
        )
        report.add(f"machine probe at commit {mark:,}", "ms", {"lakebraid": machine})
        report.add(f"files on disk at commit {mark:,}", "files", {"lakebraid": files})
        report.add(f"MiB on disk at commit {mark:,}", "MiB", {"lakebraid": size / 2**20})
    counted = (
        "requests = median per kind, as the loopback server's proxy counted them"
        if lb
        else "calls = median per fsspec LocalFileSystem method (every layer's calls)"
    )
    report.notes.append(
        f"ms = median of each mark's upserts, each `WriteClient.open` + `upsert`; {counted}; "
        "files = under the table folder; "
        "commit phases = the milliseconds per phase and data bytes each commit recorded (median); "
        "machine probe = ms of fixed work touching no table, around each mark's upserts; "
        "the rows keep their number and values, but each carries the time of the commit that "
        "last wrote it, a column whose bytes grow as upserts spread those over more commits: "
        "compare data bytes per commit before reading a change in time as history's"
    )
    report.print()
    report.save(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
