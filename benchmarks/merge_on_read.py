"""Merge-on-read beside copy-on-write and delta-rs (MERGE): the same writes on the same data,
same run (issue 15).

Workload: a table of N rows (default 10,000,000) over 30 day partitions (``upsert.py``'s rows);
1. bulk insert of the N rows;
2. upsert of N/10 rows, half updates of random keys, half new keys;
3. upsert of 1,000 updates in one day; then again by a new Python process timing the write
   alone (not imports, its rows' read, pyarrow's first call): a batch job's first write;
4. upsert of 1,000 updates of random keys (spread over every partition);
5. delete of 10,000 random keys;
6. the merge-on-read table compacted (every file group with a log), timed;
7. ten upserts of 100,000 random keys on every table, then full reads of each (the
   merge-on-read table uncompacted: every group holds up to ten logs), then its compaction.
   The reads are timed in this process (which wrote the tables) and by a new process that
   reads each table once, then ``--read-runs`` times (default 7) in turn, the first table
   alternating round by round (wall and CPU seconds);
8. ``validate()`` of each table read (every file checked), timed; it must find no problem.
lakebraid's tables are opened afresh inside each timing (``WriteClient.open``) and written by
the in-process engine with inline data compaction off (step 6 and 7 compact by hand); the
small steps 3-5 run ``--runs`` times, the table put back before each but the first: medians;
delta-rs merges on ``t.id = s.id`` as in ``upsert.py``. At the end every table is read whole
and compared with the expected rows. delta-rs runs in a Python process of its own with its
allocators as its users have them (``benchlib.own_process``). Ratios are delta-rs / lakebraid
(> 1: lakebraid faster).

    .venv/bin/python benchmarks/merge_on_read.py [--rows N] [--runs R] [--read-runs R]
        [--repeat N] [--skip-delta] [--json F]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from benchlib import (
    NA,
    Report,
    Value,
    in_turn,
    median_of_runs,
    median_timed,
    own_process,
    report_and_exit,
    timed,
)
from deltalake import DeltaTable, write_deltalake
from upsert import DAYS, delta_delete, delta_merge, digest, make_rows

from lakebraid.writers.client import WriteClient

Steps = dict[str, pa.Table]
KINDS = ("copy_on_write", "merge_on_read")
READS = 10  # upserts of READ_KEYS random keys before the timed read
READ_KEYS = 100_000
AS_READ = "-as-read"  # the copy of a table after the 10 upserts whose reads are timed
SMALL = ("one day", "spread", "delete")  # steps timed --runs times, the median reported
FRESH = "one day, new process"  # step 3's rows again, by a new process: nothing cached
FRESH_READ = "read, new process"  # the reads of step 7 again, by a new process
FRESH_CPU = "read CPU, new process"  # their CPU seconds (every thread's)


def workload(n: int, seed: int = 5) -> tuple[Steps, list[pa.Table]]:
    """The write steps, keyed as :data:`NAMES`, and the upserts before the read."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n)
    m = max(2, n // 10)
    updated = rng.choice(n, m // 2, replace=False)
    mixed_ids = np.concatenate([updated, np.arange(n, n + m - m // 2)])
    one_day = ids[ids % DAYS == 3][:1000]
    spread = rng.choice(n, min(1000, n // 2), replace=False)
    doomed = rng.choice(n, min(10_000, n // 2), replace=False)
    steps = {
        "bulk": make_rows(ids, ids % DAYS, 1, seed),
        "mixed": make_rows(mixed_ids, mixed_ids % DAYS, 2, seed + 1),
        "one day": make_rows(one_day, one_day % DAYS, 3, seed + 2),
        "spread": make_rows(spread, spread % DAYS, 4, seed + 3),
        "delete": pa.table({"id": [f"key-{i:010d}" for i in doomed.tolist()]}),
    }
    gone = set(doomed.tolist())
    alive = np.array(sorted(set(range(n)) - gone), dtype=np.int64)
    later = []
    for r in range(READS):
        keys = rng.choice(alive, min(READ_KEYS, len(alive)), replace=False)
        later.append(make_rows(keys, keys % DAYS, 10 + r, seed + 10 + r))
    return steps, later


def names(steps: Steps) -> dict[str, str]:
    return {
        "bulk": f"bulk insert {len(steps['bulk']):,} rows",
        "mixed": f"upsert {len(steps['mixed']):,} (half new)",
        "one day": f"upsert {len(steps['one day']):,} (one day)",
        FRESH: f"upsert {len(steps['one day']):,} (one day) by a new process",
        "spread": f"upsert {len(steps['spread']):,} (random keys, every day)",
        "delete": f"delete {len(steps['delete']):,} random keys",
    }


def new_process_write(system: str, rows_file: str, path: str) -> float:
    """Seconds of one upsert of ``rows_file`` into the table at ``path`` by a new Python
    process (:func:`child_write`): a batch job's first write, with nothing cached."""
    return float(own_process(__file__, ["--child", system, path, rows_file], system))


def child_write(system: str, path: str, rows_file: str) -> NoReturn:
    """In the new process: read the rows and make a first Arrow call (pyarrow imports pandas
    there, 0.5 s for either system), then time the write alone and print its seconds."""
    rows = pq.read_table(rows_file)
    pa.array([1]).to_pylist()
    if system == "delta-rs":
        seconds = timed(lambda: delta_merge(path, rows))[1]
    else:
        seconds = timed(lambda: WriteClient.open(path).upsert(rows))[1]
    report_and_exit(str(seconds))


def run_lakebraid(
    path: str, kind: str, steps: Steps, later: list[pa.Table], runs: int, rows_file: str
) -> dict[str, float]:
    options = {"index.expected.records": len(steps["bulk"]), "compaction.inline": False}
    WriteClient.create(path, "id", ["day"], "ts", table_type=kind, **options)

    def load() -> WriteClient:
        return WriteClient.open(path)

    seconds = {"bulk": timed(lambda: load().bulk_insert(steps["bulk"]))[1]}
    seconds["mixed"] = timed(lambda: load().upsert(steps["mixed"]))[1]
    for step in SMALL:

        def write(at: str, s: str = step) -> None:
            client = WriteClient.open(at)
            client.delete(steps[s]) if s == "delete" else client.upsert(steps[s])

        seconds[step] = median_of_runs(path, write, runs)
        if step == "one day":  # the same rows again: the table does not change
            fresh = partial(new_process_write, "lakebraid", rows_file)
            seconds[FRESH] = median_of_runs(path, fresh, runs, own_time=True)
    merge_on_read = kind == "merge_on_read"
    if merge_on_read:
        seconds["compaction"] = timed(lambda: load().compact())[1]
    seconds["upserts"] = sum(timed(lambda d=data: load().upsert(d))[1] for data in later)
    shutil.copytree(path, f"{path}{AS_READ}")  # the table the reads are timed on, at the end
    if merge_on_read:
        seconds["compaction after"] = timed(lambda: load().compact())[1]
    return seconds


def timed_reads(paths: dict[str, str], runs: int) -> dict[str, tuple[float, float]]:
    """The median seconds of ``runs`` full reads of each table, the tables read in turn, the
    first alternating (a drift of the machine's speed touches them alike), and the median CPU
    seconds of the process for each (every thread's: the work, less swayed than the wall by a
    busy host)."""
    samples: dict[str, list[tuple[float, float]]] = {kind: [] for kind in paths}
    kinds = list(paths)
    for n in range(runs):
        for kind in in_turn(kinds, n):
            path = paths[kind]
            cpu = time.process_time()
            elapsed = timed(lambda p=path: WriteClient.open(p).read_arrow())[1]
            samples[kind].append((elapsed, time.process_time() - cpu))
    return {
        kind: (statistics.median(t for t, _ in got), statistics.median(c for _, c in got))
        for kind, got in samples.items()
    }


def new_process_reads(paths: dict[str, str], runs: int) -> dict[str, tuple[float, float]]:
    """:func:`timed_reads` in a new Python process, after one untimed read of each table."""
    line = own_process(__file__, ["--read-child", str(runs), *paths.values()], "lakebraid")
    found = [float(x) for x in line.split()]
    return {kind: (found[2 * i], found[2 * i + 1]) for i, kind in enumerate(paths)}


def child_reads(runs: int, paths: list[str]) -> int:
    """In the new process: each table read once, then the timed reads; prints the medians
    (seconds, CPU seconds) of each table."""
    for path in paths:
        WriteClient.open(path).read_arrow()
    found = timed_reads({str(i): path for i, path in enumerate(paths)}, runs)
    print(" ".join(f"{found[str(i)][0]} {found[str(i)][1]}" for i in range(len(paths))))
    return 0


def run_delta(
    path: str, steps: Steps, later: list[pa.Table], runs: int, rows_file: str
) -> dict[str, float]:
    merge = partial(delta_merge, path)
    seconds = {"bulk": timed(lambda: write_deltalake(path, steps["bulk"], partition_by=["day"]))[1]}
    seconds["mixed"] = timed(lambda: merge(steps["mixed"]))[1]
    for step in SMALL:
        how = delta_delete if step == "delete" else delta_merge
        seconds[step] = median_of_runs(path, lambda at, s=step, h=how: h(at, steps[s]), runs)
        if step == "one day":
            fresh = partial(new_process_write, "delta-rs", rows_file)
            seconds[FRESH] = median_of_runs(path, fresh, runs, own_time=True)
    seconds["upserts"] = sum(timed(lambda d=data: merge(d))[1] for data in later)
    seconds["read"] = median_timed(lambda: DeltaTable(path).to_pyarrow_table(), runs)[1]
    return seconds


def child_delta(rows: int, runs: int, folder: str, rows_file: str) -> NoReturn:
    """In delta-rs's own process: its steps on the workload of ``rows`` rows (the same seed,
    so the same inputs), its table at ``folder``/delta; prints its seconds as JSON."""
    steps, later = workload(rows)
    report_and_exit(json.dumps(run_delta(f"{folder}/delta", steps, later, runs, rows_file)))


def expected(steps: Steps, later: list[pa.Table]) -> pa.Table:
    """The rows after every step: the latest ts of each key, less the deleted keys (the
    deletes come before the later upserts, which touch only keys still alive)."""
    before = pa.concat_tables([steps["bulk"], steps["mixed"], steps["one day"], steps["spread"]])
    gone = pc.is_in(before.column("id"), value_set=steps["delete"].column("id"))
    changes = pa.concat_tables([before.filter(pc.invert(gone)), *later])
    latest = changes.group_by("id").aggregate([("ts", "max")]).rename_columns(["id", "ts"])
    return changes.join(latest, ["id", "ts"], join_type="inner")


def report(steps: Steps, got: dict[str, dict[str, float]], checks: dict[str, str]) -> Report:
    verdict = "OK" if all(c == "OK" for c in checks.values()) else "FAIL"
    out = Report(
        "merge_on_read",
        f"{len(steps['bulk']):,} rows over {DAYS} day partitions; lakebraid copy-on-write "
        "and merge-on-read tables (in-process engine, inline compaction off), delta-rs MERGE",
        notes=[
            "merge_on_read: one table per system and type, the steps in order; each row "
            "seconds of one write with the table opened afresh; the 1,000-key upserts and the "
            "delete: the median of --runs runs (3 by default) on the same table, put back "
            "before each but the first",
            f"merge_on_read: 'read after': the median of --read-runs full reads after {READS} "
            f"upserts of {READ_KEYS:,} random keys (the merge-on-read table uncompacted), the "
            "copy-on-write and merge-on-read tables read in turn; its compaction after, timed",
            "merge_on_read: the check reads every final table whole: rows, key, amount and ts "
            "sums equal the expected ones; and validate() of each table read finds no problem",
        ],
    )
    delta = got.get("delta-rs", {})
    for key, name in names(steps).items():
        for kind in KINDS:
            values: dict[str, Value] = {"lakebraid": got[kind][key], "delta-rs": delta.get(key, NA)}
            out.add(f"{name} ({kind.replace('_', '-')})", "s", values, verdict)
    out.add("compaction after the five steps", "s", {"lakebraid": got[KINDS[1]]["compaction"]})
    for key, label in (
        ("upserts", f"{READS} upserts of {READ_KEYS:,} keys"),
        ("read", "read after"),
        (FRESH_READ, "read after, by a new process"),
        (FRESH_CPU, "read after, by a new process, CPU seconds of its threads"),
    ):
        for kind in KINDS:
            values = {"lakebraid": got[kind][key], "delta-rs": delta.get(key, NA)}
            out.add(f"{label} ({kind.replace('_', '-')})", "s", values, verdict)
    after = got[KINDS[1]]["compaction after"]
    out.add(f"compaction after the {READS} upserts", "s", {"lakebraid": after})
    for kind in KINDS:
        seconds = got[kind]["validate"]
        out.add(
            f"validate() of the table read ({kind.replace('_', '-')})", "s", {"lakebraid": seconds}
        )
    for key, label in (
        ("read", "read after"),
        (FRESH_READ, "read after by a new process"),
        (FRESH_CPU, "CPU seconds of the read after by a new process"),
    ):
        ratio = got[KINDS[1]][key] / got[KINDS[0]][key]
        out.notes.append(f"merge_on_read: {label}, merge-on-read / copy-on-write = {ratio:.2f}x")
    out.add("final tables = expected", "check", checks, verdict)  # type: ignore[arg-type]
    return out


def measure(
    steps: Steps, later: list[pa.Table], runs: int, skip_delta: bool, read_runs: int
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """One whole measurement in a fresh folder: seconds per system and step, and the check of
    every final table."""
    folder = tempfile.mkdtemp(prefix="lakebraid-mor-")
    try:
        rows_file = f"{folder}/one-day.parquet"
        pq.write_table(steps["one day"], rows_file)
        want = digest(expected(steps, later))
        got: dict[str, dict[str, float]] = {}
        reads: dict[str, Callable[[], pa.Table]] = {}
        for kind in KINDS:
            path = f"{folder}/{kind}"
            got[kind] = run_lakebraid(path, kind, steps, later, runs, rows_file)
            reads[kind] = lambda p=path: WriteClient.open(p).read_arrow()
            print(f"lakebraid {kind}: {got[kind]}", flush=True)
        read_paths = {kind: f"{folder}/{kind}{AS_READ}" for kind in KINDS}
        for kind, (seconds, _) in timed_reads(read_paths, read_runs).items():
            got[kind]["read"] = seconds
        for kind, (seconds, cpu) in new_process_reads(read_paths, read_runs).items():
            got[kind][FRESH_READ], got[kind][FRESH_CPU] = seconds, cpu
        problems: dict[str, list[str]] = {}
        for kind, path in read_paths.items():  # the tables read are checked too
            reads[f"{kind}{AS_READ}"] = lambda p=path: WriteClient.open(p).read_arrow()
            problems[kind], got[kind]["validate"] = timed(
                lambda p=path: WriteClient.open(p).validate()
            )
        if not skip_delta:  # in a process of its own, its allocators as its users have them
            args = ["--delta-child", str(len(steps["bulk"])), str(runs), folder, rows_file]
            got["delta-rs"] = json.loads(own_process(__file__, args, "delta-rs"))
            reads["delta-rs"] = lambda: DeltaTable(f"{folder}/delta").to_pyarrow_table()
            print(f"delta-rs: {got['delta-rs']}", flush=True)
        found = {name: digest(read()) for name, read in reads.items()}
        checks = {n: "OK" if d == want else f"FAIL {d} != {want}" for n, d in found.items()}
        for kind, found_problems in problems.items():
            checks[f"validate {kind}"] = (
                "OK" if not found_problems else f"FAIL {found_problems[:3]}"
            )
        return got, checks
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def medians(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per system and step, the median seconds over whole measurements."""
    return {
        system: {step: statistics.median(r[system][step] for r in runs) for step in steps}
        for system, steps in runs[0].items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--skip-delta", action="store_true")
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs of the small steps, the median reported (the table put back between them)",
    )
    parser.add_argument(
        "--read-runs",
        type=int,
        default=7,
        help="full reads of each table after the upserts, in this process and in a new one "
        "(the tables in turn, the first alternating); the median reported",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="whole measurements, one after the other in fresh folders; each row is the "
        "median of theirs (this machine's speed drifts between runs minutes apart)",
    )
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # system, path, rows file
    parser.add_argument("--read-child", nargs="+", help=argparse.SUPPRESS)  # runs, paths
    # delta-rs's own process: rows, runs, folder, rows file
    parser.add_argument("--delta-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.delta_child:
        rows, runs, folder, rows_file = args.delta_child
        return child_delta(int(rows), int(runs), folder, rows_file)
    if args.child:
        return child_write(*args.child)
    if args.read_child:
        return child_reads(int(args.read_child[0]), args.read_child[1:])
    steps, later = workload(args.rows)
    runs, checks = [], {}
    for n in range(max(1, args.repeat)):
        got, found = measure(steps, later, args.runs, args.skip_delta, args.read_runs)
        runs.append(got)
        checks = {k: v if checks.get(k, "OK") == "OK" else checks[k] for k, v in found.items()}
        ratio = got[KINDS[1]]["read"] / got[KINDS[0]]["read"]
        fresh = got[KINDS[1]][FRESH_READ] / got[KINDS[0]][FRESH_READ]
        print(
            f"measurement {n + 1}: read after, merge-on-read / copy-on-write {ratio:.2f}x "
            f"(by a new process {fresh:.2f}x)"
        )
    ours = [c for name, c in checks.items() if name != "delta-rs"]
    shown = {"lakebraid": "OK" if all(c == "OK" for c in ours) else "FAIL"}
    if "delta-rs" in checks:
        shown["delta-rs"] = checks["delta-rs"]
    table = report(steps, medians(runs), shown)
    if len(runs) > 1:
        each = ", ".join(f"{r[KINDS[1]]['read'] / r[KINDS[0]]['read']:.2f}x" for r in runs)
        fresh = ", ".join(f"{r[KINDS[1]][FRESH_READ] / r[KINDS[0]][FRESH_READ]:.2f}x" for r in runs)
        table.notes.append(
            f"merge_on_read: every row is the median of {len(runs)} whole measurements "
            f"(--repeat); read after, merge-on-read / copy-on-write, in each: {each} (by a "
            f"new process: {fresh})"
        )
    table.print()
    table.save(args.json)
    return 0 if all(c == "OK" for c in checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
