"""What a small commit costs beside its rows, and what it does: one-row appends against
20,000-row appends, lakebraid beside delta-rs, same rows, same run.

The table: unpartitioned, ``skipping.py``'s appends (``write.target.file.rows`` 20,000, 2M
expected index records), after ``--warm`` appends of 20,000 rows (default 20), so its
timelines, metadata table and inline services are in their steady state. Then ``--commits``
rounds (default 20), each an append of one row and one of 20,000 rows on either system (the
system first alternates round by round), every append timed with ``WriteClient.open`` inside
the timing as ``skipping.py`` times it, with the process's user and system CPU seconds over it
(``getrusage``: every thread's); the medians are reported. A one-row append is the fixed cost
of a commit: what every small write pays whatever its rows. The CPU seconds tell where a gap
between the systems lies: in their own work (user) or in the kernel's (files, fsyncs).

Then ``--counted`` more one-row appends (default 5, not timed) are counted by wrapping the
calls that make a commit's cost: timeline loads (listings of a timeline folder, by timeline),
instant files created, ``os.fsync`` calls (every thread's) and folder listings
(``os.listdir`` / ``os.scandir``). Counts do not follow the machine's speed: a change to the
commit protocol shows in them as it is.

    .venv/bin/python benchmarks/commit_anatomy.py [--warm N] [--commits N] [--counted N]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from benchlib import Report, in_turn, timed
from deltalake import write_deltalake
from skipping import batches

from lakebraid.timeline.store import InstantStore
from lakebraid.writers.client import WriteClient

ROWS = 20_000


class Counts:
    """Calls counted while :meth:`counting` is open, from every thread."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._guard = threading.Lock()

    def add(self, what: str) -> None:
        with self._guard:
            self.seen[what] += 1

    def wrapped(self, owner: Any, name: str, label: Callable[..., str]) -> Callable[..., Any]:
        real = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.add(label(*args, **kwargs))
            return real(*args, **kwargs)

        return counted

    @contextmanager
    def counting(self) -> Iterator[None]:
        patches = [
            (InstantStore, "_load", lambda _store, kind: f"timeline load ({kind})"),
            (InstantStore, "_put", lambda *_: "instant file created"),
            (os, "fsync", lambda *_: "fsync"),
            (os, "listdir", lambda *_: "folder listing"),
            (os, "scandir", lambda *_a, **_k: "folder listing"),
        ]
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
        for owner, name, label in patches:
            setattr(owner, name, self.wrapped(owner, name, label))
        try:
            yield
        finally:
            for owner, name, real in saved:
                setattr(owner, name, real)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--counted", type=int, default=5)
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    n = args.warm + args.commits + 1  # the last part's rows: the counted commits'
    parts = batches(ROWS * n, n)
    folder = tempfile.mkdtemp(prefix="lakebraid-anatomy-")
    lake, delta = f"{folder}/lakebraid", f"{folder}/delta"
    try:
        options = {"write.target.file.rows": ROWS, "index.expected.records": 2_000_000}
        WriteClient.create(lake, "id", [], None, **options)
        appends: dict[str, Callable[[pa.Table], object]] = {
            "lakebraid": lambda t: WriteClient.open(lake).bulk_insert(t),
            "delta-rs": lambda t: write_deltalake(delta, t, mode="append"),
        }
        print(f"{args.warm} appends of {ROWS:,} rows to warm up", flush=True)
        for part in parts[: args.warm]:
            for append in appends.values():
                append(part)
        samples = timed_rounds(appends, parts[args.warm : -1])
        counts = Counts()
        ones = [parts[-1].slice(i, 1) for i in range(args.counted)]
        with counts.counting():
            for row in ones:
                appends["lakebraid"](row)
        report = make_report(args, samples, counts.seen)
        report.print()
        report.save(args.json)
        return 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


Sample = tuple[float, float, float]  # seconds, user CPU seconds, system CPU seconds


def timed_rounds(
    appends: dict[str, Callable[[pa.Table], object]], parts: list[pa.Table]
) -> dict[tuple[str, int], list[Sample]]:
    """Seconds and CPU seconds of every append by (system, rows): per round a one-row and a
    full append on each system, the first system alternating."""
    samples: dict[tuple[str, int], list[Sample]] = {}
    systems = list(appends)
    print(f"{len(parts)} rounds of appends of 1 and {ROWS:,} rows", flush=True)
    for i, part in enumerate(parts):
        turn = in_turn(systems, i)
        for piece in (part.slice(0, 1), part.slice(1)):  # keys new to both tables
            for system in turn:
                before = resource.getrusage(resource.RUSAGE_SELF)
                elapsed = timed(lambda s=system, p=piece: appends[s](p))[1]
                after = resource.getrusage(resource.RUSAGE_SELF)
                cpu = (after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)
                samples.setdefault((system, piece.num_rows), []).append((elapsed, *cpu))
    return samples


def make_report(
    args: argparse.Namespace, samples: dict[tuple[str, int], list[Sample]], seen: Counter[str]
) -> Report:
    report = Report(
        "commit_anatomy",
        f"appends to an unpartitioned table after {args.warm} appends of {ROWS:,} rows",
        notes=[
            f"commit_anatomy: medians of {args.commits} rounds, each a one-row and a "
            f"{ROWS - 1:,}-row append (new keys) on both systems, the first system alternating; "
            "WriteClient.open inside each timing",
            f"commit_anatomy: the counts are per one-row commit, the mean of {args.counted} "
            "more commits counted by wrapping the calls (every thread's)",
        ],
    )
    full = max(rows for _, rows in samples)
    for rows, name in ((1, "append of 1 row (a commit's fixed cost)"), (full, "")):
        name = name or f"append of {rows:,} rows"
        kinds = ((0, name), (1, f"user CPU of an {name}"), (2, f"system CPU of an {name}"))
        for at, what in kinds:
            found = {s: [x[at] for x in v] for (s, r), v in samples.items() if r == rows}
            report.add(what, "s", {s: statistics.median(v) for s, v in found.items()})
    per = {what: n / max(1, args.counted) for what, n in seen.items()}
    loads = {k: v for k, v in per.items() if k.startswith("timeline load")}
    detail = ", ".join(f"{k[15:-1]} {v:g}" for k, v in sorted(loads.items()))
    report.add("timeline loads per commit", "count", {"lakebraid": sum(loads.values())}, detail)
    for what, name in (
        ("instant file created", "instant files created per commit"),
        ("fsync", "fsyncs per commit"),
        ("folder listing", "folder listings per commit"),
    ):
        report.add(name, "count", {"lakebraid": per.get(what, 0.0)})
    return report


if __name__ == "__main__":
    raise SystemExit(main())
