"""Upsert and delete on lakebraid beside delta-rs (``deltalake`` MERGE), same data, same run.

Workload (issue 4): a table of N rows (default 10,000,000) over 30 day partitions; then
1. bulk insert of the N rows;
2. upsert of N/10 rows: half updates of random existing keys, half new keys;
3. upsert of 1,000 updates, all in one partition;
4. delete of 10,000 existing keys.
delta-rs runs the same steps with ``write_deltalake`` and ``merge`` (key predicate
``t.id = s.id``; deletes as a MERGE with ``when_matched_delete``). Prints one table with
seconds and the ratio delta-rs / lakebraid (> 1: lakebraid is faster).

    .venv/bin/python benchmarks/upsert.py [--rows N] [--skip-delta]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from writers.client import WriteClient

DAYS = 30


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


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def workload(n: int, seed: int = 1) -> dict[str, pa.Table]:
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


def run_lakebraid(folder: str, data: dict[str, pa.Table]) -> dict[str, float]:
    client = WriteClient.create(
        f"{folder}/lakebraid", "id", ["day"], "ts", **{"index.expected.records": len(data["bulk"])}
    )
    return {
        "bulk insert": timed(lambda: client.bulk_insert(data["bulk"])),
        "upsert mixed": timed(lambda: client.upsert(data["mixed"])),
        "upsert 1,000 (one day)": timed(lambda: client.upsert(data["small"])),
        "delete 10,000": timed(lambda: client.delete(data["deletes"])),
    }


def run_delta(folder: str, data: dict[str, pa.Table]) -> dict[str, float]:
    path = f"{folder}/delta"

    def merge(source: pa.Table) -> None:
        (
            DeltaTable(path)
            .merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    def delete(keys: pa.Table) -> None:
        (
            DeltaTable(path)
            .merge(keys, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_delete()
            .execute()
        )

    return {
        "bulk insert": timed(lambda: write_deltalake(path, data["bulk"], partition_by=["day"])),
        "upsert mixed": timed(lambda: merge(data["mixed"])),
        "upsert 1,000 (one day)": timed(lambda: merge(data["small"])),
        "delete 10,000": timed(lambda: delete(data["deletes"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--skip-delta", action="store_true")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="lakebraid-bench-")
    try:
        data = workload(args.rows)
        print(f"rows {args.rows:,}; mixed upsert {len(data['mixed']):,} rows", flush=True)
        ours = run_lakebraid(folder, data)
        theirs = {} if args.skip_delta else run_delta(folder, data)
        print(f"{'step':<26}{'lakebraid s':>12}{'delta-rs s':>12}{'ratio':>8}")
        for step, seconds in ours.items():
            other = theirs.get(step)
            ratio = f"{other / seconds:7.2f}x" if other else "      -"
            other_text = f"{other:12.2f}" if other else f"{'-':>12}"
            print(f"{step:<26}{seconds:12.2f}{other_text}{ratio}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
