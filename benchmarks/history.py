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
folder after them.

The machine's speed moves by tens of percent over a run this long, so each mark past
``--baseline`` (commit 10) is also *paired*: a copy of the table saved at the baseline takes
upserts alternating with the mark's (a fresh copy per mark), and the ratio of the two medians
compares the histories on the machine as it was in the same minutes. Figures are printed,
never asserted. Run from the repo root::

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
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import fsspec  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from benchlib import Report  # noqa: E402
from fsspec.implementations.local import LocalFileSystem  # noqa: E402

from lakebraid.metadata.commits import read_commit  # noqa: E402
from lakebraid.timeline.instant import Action  # noqa: E402
from lakebraid.writers.cli.loopback_s3 import LoopbackS3  # noqa: E402
from lakebraid.writers.client import WriteClient  # noqa: E402

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
    """The upserts of one table. ``commits``: attach to a table the workload built (a copy of
    one at that many commits) instead of creating it."""

    def __init__(
        self,
        path: str,
        seed: int,
        options: dict[str, Any] | None = None,
        commits: int | None = None,
    ) -> None:
        self.path, self.rng = path, np.random.default_rng(seed)
        self.options = options or {}
        self.counted: Callable[[Callable[[], Any]], tuple[Any, collections.Counter[str]]]
        self.counted = local_calls
        self.commits = commits or 0
        if commits is not None:
            return
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
        # the commit's own body, as `lakebraid history` shows it: reading the whole history
        # here would put garbage proportional to it between two timed upserts (its
        # collection then lands in the next one)
        commit = client.table.timeline().get(instant, Action.COMMIT)
        if commit is None:
            raise RuntimeError(f"{instant} is not on the global timeline of {self.path}")
        metrics = read_commit(client.table, commit).metrics
        if metrics is None:
            raise RuntimeError(f"commit {instant} of {self.path} recorded no metrics")
        recorded = {"data bytes": metrics.bytes_written, **metrics.phases_ms}
        return elapsed, calls, recorded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--at", default="1,100,1000", help="commit counts to measure at")
    parser.add_argument("--runs", type=int, default=10, help="upserts measured at each")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--baseline", type=int, default=10, help="commit count of the copy paired with later marks"
    )
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


class Run:
    """Where the table lives: its workload, how to count files and copy the table."""

    def __init__(self, args: argparse.Namespace, folder: str, lb: LoopbackS3 | None) -> None:
        self.args, self.lb = args, lb
        if lb is None:
            self.root = folder
            self.fs: fsspec.AbstractFileSystem = LocalFileSystem()
        else:
            self.root = f"s3://{lb.new_bucket()}"
            self.fs = fsspec.filesystem("s3", **lb.storage_options())
        self.options = lb.storage_options() if lb else None
        self.work = self.workload(f"{self.root}/t", args.seed)
        self.saved: str | None = None  # the copy at --baseline commits

    def workload(self, path: str, seed: int, commits: int | None = None) -> Workload:
        work = Workload(path, seed, self.options, commits)
        if self.lb is not None:
            work.counted = s3_calls(self.lb)
        return work

    def disk(self, path: str) -> tuple[int, int]:
        return disk(path) if self.lb is None else s3_disk(self.lb, path)

    def copy(self, source: str, target: str) -> None:
        if self.lb is None:
            shutil.copytree(source, target, symlinks=True)
        else:
            self.fs.copy(source, target, recursive=True)

    def advance(self, commits: int) -> None:
        """Upsert until the table holds ``commits``, saving a copy at the baseline."""
        while self.work.commits < commits:
            self.work.upsert()
            if self.work.commits == self.args.baseline:
                self.saved = f"{self.root}/baseline"
                self.copy(self.work.path, self.saved)

    def baseline(self, mark: int) -> Workload | None:
        """A fresh copy of the baseline table for ``mark`` (None: no baseline yet)."""
        if self.saved is None or mark <= self.args.baseline:
            return None
        path = f"{self.root}/b{mark}"
        self.copy(self.saved, path)
        return self.workload(path, self.args.seed + mark, self.args.baseline)


Result = tuple[float, collections.Counter[str], dict[str, int]]


def paired(work: Workload, base: Workload | None, runs: int) -> tuple[list[Result], list[Result]]:
    """``runs`` upserts of ``work`` and, alternating with them, of ``base`` (each goes first
    every other time), so both see the machine as it is in the same minutes."""
    mine: list[Result] = []
    theirs: list[Result] = []
    for n in range(runs):
        if base is not None and n % 2:
            theirs.append(base.upsert())
        mine.append(work.upsert())
        if base is not None and not n % 2:
            theirs.append(base.upsert())
    return mine, theirs


def summary(runs: list[Result]) -> tuple[float, float, dict[str, float], dict[str, float]]:
    """Median and mean ms, median calls per kind, median recorded figures."""
    ms = statistics.median(r[0] for r in runs) * 1000
    mean = statistics.mean(r[0] for r in runs) * 1000
    kinds = sorted({k for _, c, _ in runs for k in c})
    calls = {k: statistics.median(c[k] for _, c, _ in runs) for k in kinds}
    recorded = {k: statistics.median(r[2][k] for r in runs) for k in runs[0][2]}
    return ms, mean, calls, recorded


def measure(args: argparse.Namespace, marks: list[int], folder: str, lb: LoopbackS3 | None) -> int:
    """The runs at each mark, printed and reported."""
    where = "a loopback S3 server (moto)" if lb else "local disk"
    report = Report(
        "history-s3" if lb else "history",
        f"{ROWS:,} rows of random values, {DAYS} day partitions on {where}; one {BATCH}-row "
        "upsert of random existing keys per commit, default options (inline services on)",
    )
    run = Run(args, folder, lb)
    unit = "requests" if lb else "calls"
    started = time.perf_counter()
    for mark in marks:
        run.advance(mark)
        base = run.baseline(mark)
        mine, theirs = paired(run.work, base, args.runs)
        ms, mean, calls, recorded = summary(mine)
        files, size = run.disk(run.work.path)
        shown = ", ".join(f"{k} {v:g}" for k, v in calls.items())
        phases = ", ".join(f"{k} {v:g}" for k, v in recorded.items())
        print(
            f"[commit {mark:,}] {ms:.0f} ms per upsert (mean {mean:.0f}); {unit} per upsert: "
            f"{shown}; recorded by the commit: {phases}; "
            f"{files:,} files, {size / 2**20:.1f} MiB on disk "
            f"({time.perf_counter() - started:.0f} s so far)",
            flush=True,
        )
        add_mark(report, mark, unit, (ms, mean, calls, recorded), files, size)
        if base is not None:
            add_pair(report, mark, args.baseline, (ms, mean, calls), summary(theirs))
            run.fs.rm(base.path, recursive=True)
    counted = (
        "requests = median per kind, as the loopback server's proxy counted them"
        if lb
        else "calls = median per fsspec LocalFileSystem method (every layer's calls)"
    )
    report.notes.append(
        f"ms = median of each mark's upserts, each `WriteClient.open` + `upsert`; {counted}; "
        "files = under the table folder; "
        "commit phases = the milliseconds per phase and data bytes each commit recorded (median); "
        f"paired = each later mark's upserts alternate with upserts of a fresh copy of the table "
        f"saved at commit {args.baseline}, so the ratio compares two histories on the machine "
        "as it was in the same minutes (this machine's speed moves by tens of percent over a "
        "long run); the rows keep their number and values, but each carries the time of the "
        "commit that last wrote it, a column whose bytes grow as upserts spread those over more "
        "commits: compare data bytes per commit before reading a change in time as history's"
    )
    report.print()
    report.save(args.json)
    return 0


def add_mark(
    report: Report,
    mark: int,
    unit: str,
    figures: tuple[float, float, dict[str, float], dict[str, float]],
    files: int,
    size: int,
) -> None:
    ms, mean, calls, recorded = figures
    report.add(f"upsert {BATCH} rows at commit {mark:,}", "ms", {"lakebraid": ms})
    report.add(f"mean upsert with inline services at commit {mark:,}", "ms", {"lakebraid": mean})
    report.add(
        f"{unit.replace('calls', 'fs calls')} per upsert at commit {mark:,}",
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
    report.add(f"files on disk at commit {mark:,}", "files", {"lakebraid": files})
    report.add(f"MiB on disk at commit {mark:,}", "MiB", {"lakebraid": size / 2**20})


def add_pair(
    report: Report,
    mark: int,
    baseline: int,
    mine: tuple[float, float, dict[str, float]],
    theirs: tuple[float, float, dict[str, float], dict[str, float]],
) -> None:
    """The mark against the baseline copy measured alternately with it."""
    ms, mean, calls = mine
    b_ms, b_mean, b_calls, _ = theirs
    pairs = [("median", ms, b_ms), ("mean with services", mean, b_mean)]
    pairs.append(("calls", sum(calls.values()), sum(b_calls.values())))
    for what, at_mark, at_base in pairs:
        print(
            f"  paired with commit {baseline:,}: {what} {at_mark:.0f} against {at_base:.0f} "
            f"= {at_mark / at_base:.2f}x",
            flush=True,
        )
    report.add(
        f"upsert at commit {mark:,} / at commit {baseline:,}, paired (median)",
        "x",
        {"lakebraid": ms / b_ms},
        f"{ms:.0f} ms / {b_ms:.0f} ms; mean with services {mean:.0f} / {b_mean:.0f} = "
        f"{mean / b_mean:.2f}x; calls {sum(calls.values()):g} / {sum(b_calls.values()):g}",
    )


if __name__ == "__main__":
    sys.exit(main())
