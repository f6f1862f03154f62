"""Upsert and delete on lakebraid beside delta-rs (MERGE) and pyiceberg (``Table.upsert`` and
``Table.delete``), same data, same run.

Workload (issue 4): a table of N rows (default 10,000,000) over 30 day partitions; then
1. bulk insert of the N rows (delta-rs ``write_deltalake``, pyiceberg ``append``);
2. upsert of N/10 rows: half updates of random existing keys, half new keys;
3. upsert of 1,000 updates, all in one partition;
4. delete of 10,000 existing keys.
delta-rs merges on ``t.id = s.id`` (``when_matched_update_all`` + ``when_not_matched_insert_all``;
deletes as a MERGE with ``when_matched_delete``); pyiceberg upserts with ``join_cols=["id"]`` and
deletes with ``In("id", keys)``; both partition by day like lakebraid. Every step opens its
table afresh inside the timing (``WriteClient.open``, ``DeltaTable(path)``,
``catalog.load_table``); tables are created (empty) and inputs built before any timing. At the end
every system's table is read whole and compared with the expected rows (count, keys, amounts,
ts). Each system runs in a Python process of its own (``benchlib.own_process``: a peer's with
its allocators as its users have them), which builds the same inputs from the same seed.
Prints seconds and peer / lakebraid (> 1: lakebraid is faster).

    .venv/bin/python benchmarks/upsert.py [--rows N] [--repeat R] [--skip-delta] [--skip-iceberg]
        [--json F]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from collections.abc import Callable
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from benchlib import (
    SKIPPED,
    Report,
    Value,
    iceberg_catalog,
    iceberg_table,
    in_turn,
    own_process,
    report_and_exit,
    timed,
)
from deltalake import DeltaTable, write_deltalake
from pyiceberg.expressions import In
from pyiceberg.table import Table as IcebergTable

from lakebraid.writers.client import WriteClient

DAYS = 30
Steps = dict[str, pa.Table]
Outcome = tuple[dict[str, float], Callable[[], pa.Table]]


def make_rows(ids: np.ndarray, days: np.ndarray, ts: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = pa.array([f"key-{i:010d}" for i in ids.tolist()], pa.string())
    day_text = np.array([f"2024-01-{d + 1:02d}" for d in range(DAYS)], dtype=object)
    return pa.table(
        {
            "id": keys,
            "day": pa.array(day_text[days].tolist(), pa.string()),
            "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
            "amount": pa.array(np.round(rng.random(len(ids)) * 1000, 2)),
            "note": pa.array(np.where(rng.random(len(ids)) < 0.5, "a", "b").tolist(), pa.string()),
        }
    )


def workload(n: int, seed: int = 1) -> Steps:
    """The four inputs, keyed ``bulk``, ``mixed``, ``small``, ``deletes`` (an ``id`` table)."""
    rng = np.random.default_rng(seed)
    base_ids = np.arange(n)
    base = make_rows(base_ids, base_ids % DAYS, 1, seed)
    m = max(2, n // 10)
    updated = rng.choice(n, m // 2, replace=False)
    fresh = np.arange(n, n + m - m // 2)
    ids = np.concatenate([updated, fresh])
    mixed = make_rows(ids, ids % DAYS, 2, seed + 1)
    one_day = base_ids[base_ids % DAYS == 3][:1000]
    small = make_rows(one_day, one_day % DAYS, 3, seed + 2)
    doomed = rng.choice(n, min(10_000, n // 2), replace=False)
    deletes = pa.table({"id": pa.array([f"key-{i:010d}" for i in doomed.tolist()], pa.string())})
    return {"bulk": base, "mixed": mixed, "small": small, "deletes": deletes}


def step_names(data: Steps) -> dict[str, str]:
    """Workload key -> operation name in the table."""
    return {
        "bulk": f"bulk insert {len(data['bulk']):,} rows",
        "mixed": f"upsert {len(data['mixed']):,} (half new)",
        "small": f"upsert {len(data['small']):,} (one day)",
        "deletes": f"delete {len(data['deletes']):,} keys",
    }


# ---- the three systems ---------------------------------------------------------------------
def run_lakebraid(folder: str, data: Steps) -> Outcome:
    path = f"{folder}/lakebraid"
    WriteClient.create(path, "id", ["day"], "ts", **{"index.expected.records": len(data["bulk"])})

    def load() -> WriteClient:
        return WriteClient.open(path)

    seconds = {
        "bulk": timed(lambda: load().bulk_insert(data["bulk"]))[1],
        "mixed": timed(lambda: load().upsert(data["mixed"]))[1],
        "small": timed(lambda: load().upsert(data["small"]))[1],
        "deletes": timed(lambda: load().delete(data["deletes"]))[1],
    }
    return seconds, lambda: load().read_arrow()


def delta_merge(path: str, source: pa.Table) -> None:
    """delta-rs's upsert: MERGE on ``t.id = s.id``, update matched, insert the rest."""
    (
        DeltaTable(path)
        .merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def delta_delete(path: str, keys: pa.Table) -> None:
    """delta-rs's delete of keys: MERGE on ``t.id = s.id``, delete matched."""
    (
        DeltaTable(path)
        .merge(keys, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete()
        .execute()
    )


def run_delta(folder: str, data: Steps) -> Outcome:
    path = f"{folder}/delta"
    seconds = {
        "bulk": timed(lambda: write_deltalake(path, data["bulk"], partition_by=["day"]))[1],
        "mixed": timed(lambda: delta_merge(path, data["mixed"]))[1],
        "small": timed(lambda: delta_merge(path, data["small"]))[1],
        "deletes": timed(lambda: delta_delete(path, data["deletes"]))[1],
    }
    return seconds, lambda: DeltaTable(path).to_pyarrow_table()


def run_iceberg(folder: str, data: Steps) -> Outcome:
    catalog = iceberg_catalog(f"{folder}/iceberg")
    name = iceberg_table(catalog, "upsert", data["bulk"].schema, ["day"]).name()

    def load() -> IcebergTable:
        return catalog.load_table(name)

    doomed = data["deletes"].column("id").to_pylist()
    seconds = {
        "bulk": timed(lambda: load().append(data["bulk"]))[1],
        "mixed": timed(lambda: load().upsert(data["mixed"], join_cols=["id"]))[1],
        "small": timed(lambda: load().upsert(data["small"], join_cols=["id"]))[1],
        "deletes": timed(lambda: load().delete(In("id", doomed)))[1],
    }
    return seconds, lambda: load().scan().to_arrow()


# ---- correctness ---------------------------------------------------------------------------
def digest(table: pa.Table) -> tuple[int, int, int, int]:
    """Rows, sum of key numbers, sum of amounts in cents, sum of ts."""
    keys = pc.cast(pc.utf8_slice_codeunits(table.column("id"), 4), pa.int64())
    cents = pc.cast(pc.round(pc.multiply(table.column("amount"), 100)), pa.int64())
    total = [int(pc.sum(c).as_py() or 0) for c in (keys, cents, table.column("ts"))]
    return (table.num_rows, *total)  # type: ignore[return-value]


def expected(data: Steps) -> pa.Table:
    """The table after the four steps: the latest ts of every key, less the deleted keys."""
    changes = pa.concat_tables([data["bulk"], data["mixed"], data["small"]])
    latest = changes.group_by("id").aggregate([("ts", "max")]).rename_columns(["id", "ts"])
    rows = changes.join(latest, ["id", "ts"], join_type="inner")
    gone = pc.is_in(rows.column("id"), value_set=data["deletes"].column("id"))
    return rows.filter(pc.invert(gone))


RUNNERS: dict[str, Callable[[str, Steps], Outcome]] = {
    "lakebraid": run_lakebraid,
    "delta-rs": run_delta,
    "pyiceberg": run_iceberg,
}


def run_one(system: str, rows: int) -> NoReturn:
    """In a system's own process: its steps on the workload of ``rows`` rows in a new folder;
    prints its seconds and the digest of its final table as one JSON line."""
    folder = tempfile.mkdtemp(prefix="lakebraid-bench-")
    try:
        seconds, read = RUNNERS[system](folder, workload(rows))
        found = json.dumps({"seconds": seconds, "digest": digest(read())})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report_and_exit(found)


Run = tuple[dict[str, float], tuple[int, ...]]  # seconds by step, digest of the final table


def measure_rounds(rows: int, systems: list[str], repeat: int) -> dict[str, list[Run]]:
    """Each system's whole workload ``repeat`` times, each run in a new process, the systems
    in turn, a different one first each round (``benchlib.in_turn``)."""
    rounds: dict[str, list[Run]] = {system: [] for system in systems}
    for n in range(max(1, repeat)):
        for system in in_turn(systems, n):
            line = own_process(__file__, ["--rows", str(rows), "--system", system], system)
            found = json.loads(line)
            rounds[system].append((found["seconds"], tuple(found["digest"])))
            print(f"{system} (run {n + 1}): {found['seconds']}", flush=True)
    return rounds


def median_seconds(runs: list[Run]) -> dict[str, float]:
    """Per step, the median of the runs' seconds."""
    return {step: statistics.median(r[0][step] for r in runs) for step in runs[0][0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--skip-delta", action="store_true")
    parser.add_argument("--skip-iceberg", action="store_true")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="whole runs of each system's workload, the systems in turn (the first "
        "alternating); each row is the median of theirs (this machine's speed drifts between "
        "runs minutes apart, and one run per system would compare different minutes)",
    )
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument("--system", default=None, help=argparse.SUPPRESS)  # a system's process
    args = parser.parse_args(argv)
    if args.system:
        return run_one(args.system, args.rows)
    data = workload(args.rows)
    names = step_names(data)
    print(f"rows {args.rows:,}; mixed upsert {len(data['mixed']):,} rows", flush=True)
    skipped = {"delta-rs": args.skip_delta, "pyiceberg": args.skip_iceberg}
    rounds = measure_rounds(args.rows, [s for s in RUNNERS if not skipped.get(s)], args.repeat)
    outcomes = {system: median_seconds(runs) for system, runs in rounds.items()}
    want = digest(expected(data))
    checks: dict[str, Value] = {
        s: SKIPPED if skipped.get(s) else "OK" for s in RUNNERS if s not in outcomes
    }
    for system, runs in rounds.items():
        wrong = [got for _, got in runs if got != want]
        checks[system] = "OK" if not wrong else f"FAIL {wrong[0]} != {want}"
    verdict = "OK" if all(c in ("OK", SKIPPED) for c in checks.values()) else "FAIL"
    report = Report(
        "upsert",
        f"{args.rows:,} rows over {DAYS} day partitions, keys key-NNNNNNNNNN",
        notes=[
            "upsert: seconds of one write each (table opened afresh, then the write), on one "
            "table in workload order; inputs are built beforehand; each system in a Python "
            "process of its own (the peers' with their allocators as their users have them); "
            f"each row the median of {max(1, args.repeat)} whole runs per system (--repeat), "
            "the systems in turn, the first alternating",
            "upsert: the check reads each final table whole: rows, key, amount and ts sums "
            "equal the expected ones",
            "upsert: lakebraid tags rows with its record index and writes index entries for "
            "every new key; delta-rs merges with a DataFusion join; pyiceberg scans for "
            "In(id, keys), compares matched rows in Python, then overwrites and appends",
        ],
    )
    for key, name in names.items():
        times = {s: outcomes[s][key] if s in outcomes else SKIPPED for s in RUNNERS}
        report.add(name, "s", times, verdict)
    report.add("final table = expected", "check", checks, verdict)
    report.print()
    report.save(args.json)
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    raise SystemExit(main())
