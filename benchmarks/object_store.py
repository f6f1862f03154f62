"""Requests and seconds of lakebraid on an object store: tables on a loopback S3 server (moto
behind the counting proxy of ``lakebraid.writers.cli.loopback_s3``), in-process engine, default
options. Each step runs once on a table opened just before (the open not counted); it prints
its requests by kind (LIST, HEAD, GET, PUT, DELETE with multi-object deletes, POST) and seconds.

Main table, ``--rows`` rows (1,000,000) over 30 day partitions, UUID-like keys: create; bulk
insert; upsert of 1,000 existing keys of one day (goal: at most 60 requests); upsert of rows/10
rows, half new, over all days; delete of 1,000 keys; lookup of 1,000 keys; then it is read back
and compared with the expected rows. Listing table, ``--partitions-listing`` (5,000) partitions
of one row (one file) each: bulk insert; a read whose filter (``n < P/100`` on a column
clustered per file) keeps 1% of the files (``file_paths(where=)`` and reading them); listing
every file from metadata (``files()``, in-process caches cleared) and with ``fs.find`` of the
table folder (medians of ``--runs``; goal: find / metadata at least 500x). Goals are verdicts
in the check column; the exit code is 1 only when a correctness check fails.

``--faults``: ``--fault-ops`` random operations (upserts of 100 rows, half stored keys, and
deletes of 10 keys) on a fresh small table while the proxy fails ``--fault-rate`` of the
requests (503, 500, connection reset, reply lost after the store acted). A model takes the
operations that returned (one that raised is not in it); then faults off, ``recover()``, and
the check: the table's rows equal the model and ``validate()`` is ``[]``.

    .venv/bin/python benchmarks/object_store.py [--rows N] [--partitions-listing P]
        [--runs R] [--faults] [--fault-ops K] [--fault-rate F] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from benchlib import Report, clear_process_caches, median_timed, timed

from lakebraid.timeline.layout import BRAID_DIR
from lakebraid.writers.cli.loopback_s3 import LoopbackS3
from lakebraid.writers.client import WriteClient
from lakebraid.writers.read.plan import read_arrow_files

T = TypeVar("T")
DAYS = 30
KINDS = ("LIST", "HEAD", "GET", "PUT", "DELETE", "POST")
UPSERT_GOAL = 60  # requests of the 1,000-row upsert into one partition
LISTING_GOAL = 500.0  # fs.find / metadata listing
SPREAD = 0x9E3779B97F4A7C15F39CC0605CEDC835  # odd: i -> i * SPREAD mod 2**128 is one-to-one


def breakdown(counts: Counter[str]) -> str:
    """``LIST 3, HEAD 1, ...`` in :data:`KINDS` order (every kind, zeros too)."""
    return ", ".join(f"{kind} {counts[kind]}" for kind in KINDS)


def uuid_keys(ids: np.ndarray) -> pa.Array:
    """A UUID-looking key per id, spread over the key space, one-to-one."""
    return pa.array([str(uuid.UUID(int=i * SPREAD % (1 << 128))) for i in ids.tolist()])


def make_rows(ids: np.ndarray, ts: int, seed: int) -> pa.Table:
    """Rows of the main table for ``ids``: day ``id % 30``, precombine ``ts``."""
    rng = np.random.default_rng(seed)
    day_text = np.array([f"2024-01-{d + 1:02d}" for d in range(DAYS)], dtype=object)
    return pa.table(
        {
            "id": uuid_keys(ids),
            "day": pa.array(day_text[ids % DAYS].tolist(), pa.string()),
            "ts": pa.array(np.full(len(ids), ts, dtype=np.int64)),
            "seq": pa.array(ids.astype(np.int64)),
            "amount": pa.array(np.round(rng.random(len(ids)) * 1000, 2)),
            "note": pa.array(np.where(rng.random(len(ids)) < 0.5, "a", "b").tolist(), pa.string()),
        }
    )


def workload(n: int, seed: int = 1) -> dict[str, pa.Table]:
    """The main table's inputs: ``bulk``, ``small`` (1,000 keys of day 4), ``mixed`` (n/10,
    half new), ``deletes`` and ``lookups`` (1,000 keys each, an ``id`` table)."""
    rng = np.random.default_rng(seed)
    base_ids = np.arange(n)
    one_day = base_ids[base_ids % DAYS == 3][:1000]
    m = max(2, n // 10)
    ids = np.concatenate([rng.choice(n, m // 2, replace=False), np.arange(n, n + m - m // 2)])
    doomed = rng.choice(n, min(1000, n // 4), replace=False)
    kept = np.setdiff1d(base_ids, doomed)
    wanted = rng.choice(kept, min(1000, len(kept)), replace=False)
    return {
        "bulk": make_rows(base_ids, 1, seed),
        "small": make_rows(one_day, 2, seed + 1),
        "mixed": make_rows(ids, 3, seed + 2),
        "deletes": pa.table({"id": uuid_keys(doomed)}),
        "lookups": pa.table({"id": uuid_keys(wanted)}),
    }


def expected(data: dict[str, pa.Table]) -> pa.Table:
    """The main table after the steps: each key's latest row, less the deleted keys."""
    changes = pa.concat_tables([data["bulk"], data["small"], data["mixed"]])
    latest = changes.group_by("id").aggregate([("ts", "max")]).rename_columns(["id", "ts"])
    rows = changes.join(latest, ["id", "ts"], join_type="inner")
    return rows.filter(pc.invert(pc.is_in(rows.column("id"), value_set=data["deletes"]["id"])))


def digest(table: pa.Table) -> tuple[int, ...]:
    """Rows, and the sums of seq, amount in cents and ts."""
    cents = pc.cast(pc.round(pc.multiply(table.column("amount"), 100)), pa.int64())
    sums = [int(pc.sum(c).as_py() or 0) for c in (table.column("seq"), cents, table["ts"])]
    return (table.num_rows, *sums)


class Bench:
    """The server, the report and the one way a step is measured (:meth:`measure`)."""

    def __init__(self, lb: LoopbackS3, report: Report) -> None:
        self.lb = lb
        self.report = report
        self.options = lb.storage_options()

    def open(self, url: str) -> WriteClient:
        return WriteClient.open(url, storage_options=self.options)

    def measure(self, name: str, work: Callable[[], T]) -> tuple[T, Counter[str], float]:
        """Run ``work`` once; print and return its result, requests by kind and seconds."""
        with self.lb.counting() as counting:
            result, seconds = timed(work)
        counts, total = counting.counts, counting.total
        print(f"  {name}: {seconds:.2f} s, {total:,} requests ({breakdown(counts)})", flush=True)
        return result, counts, seconds

    def add(self, name: str, counts: Counter[str], goal: int | None = None) -> None:
        """A ``requests`` row: the total, the kinds (and the goal's verdict) as the check."""
        total, kinds = sum(counts.values()), breakdown(counts)
        if goal is not None:
            kinds += f"; goal <= {goal}: {'OK' if total <= goal else 'over goal'}"
        self.report.add(name, "requests", {"lakebraid": total}, kinds)

    def step(self, name: str, work: Callable[[], T], goal: int | None = None) -> T:
        """:meth:`measure`, then its rows: requests (see :meth:`add`) and seconds."""
        result, counts, seconds = self.measure(name, work)
        self.add(name, counts, goal)
        self.report.add(name, "s", {"lakebraid": seconds})
        return result


def main_table(bench: Bench, url: str, n: int) -> str:
    """Steps 1-6 on the main table; the check of its final rows ("OK" or "FAIL ...")."""
    data = workload(n)
    create = WriteClient.create
    bench.step(
        "create table", lambda: create(url, "id", ["day"], "ts", storage_options=bench.options)
    )
    c = bench.open(url)
    bench.step(f"bulk insert {n:,} rows", lambda: c.bulk_insert(data["bulk"]))
    c = bench.step("open table", lambda: bench.open(url))
    small = len(data["small"])
    name = f"upsert {small:,} rows, one partition"
    bench.step(name, lambda: c.upsert(data["small"]), goal=UPSERT_GOAL)
    c = bench.open(url)
    mixed = len(data["mixed"])
    bench.step(f"upsert {mixed:,} rows (half new, all days)", lambda: c.upsert(data["mixed"]))
    c = bench.open(url)
    doomed = data["deletes"]["id"]
    bench.step(f"delete {len(doomed):,} keys", lambda: c.delete(doomed.to_pylist()))
    c = bench.open(url)
    wanted = data["lookups"]["id"].to_pylist()
    found = bench.step(f"lookup {len(wanted):,} keys", lambda: c.lookup(wanted))
    missing = sum(1 for where in found.values() if where is None)
    got, want = digest(bench.open(url).read_arrow()), digest(expected(data))
    problems = [f"{missing} keys not found"] if missing else []
    if got != want:
        problems.append(f"rows {got} != {want}")
    return "OK" if not problems else "FAIL " + "; ".join(problems)


# ---- the listing table -------------------------------------------------------------------
def listing_table(bench: Bench, url: str, partitions: int, runs: int) -> list[str]:
    """Steps on a table of ``partitions`` one-row (one-file) partitions ``p000000000``...; ``n``
    is the partition's number. Returns the failed checks."""
    n = np.arange(partitions)
    keys, parts = ([f"{prefix}{i:09d}" for i in n.tolist()] for prefix in ("row-", "p"))
    rows = pa.table({"id": keys, "part": parts, "n": n, "ts": np.ones(partitions, np.int64)})
    WriteClient.create(url, "id", ["part"], "ts", storage_options=bench.options)
    c = bench.open(url)
    bench.step(f"bulk insert {partitions:,} partitions x 1 row", lambda: c.bulk_insert(rows))
    return [*read_one_percent(bench, url, partitions), *list_files(bench, url, partitions, runs)]


def read_one_percent(bench: Bench, url: str, partitions: int) -> list[str]:
    """Read the rows ``n < partitions/100``: the files the filter keeps (by ``n``'s column
    statistics), then those files; a row of the files opened."""
    c = bench.open(url)
    spark, seconds = timed(lambda: c.spark)  # file_paths reads SQL text as the session does
    print(f"  (Spark session started in {seconds:.1f} s, not counted)", flush=True)
    k = max(1, partitions // 100)
    where = f"n < {k}"

    def read() -> tuple[int, int]:
        paths = c.file_paths(where=where)
        table = read_arrow_files(c.table.fs, paths, c.schema(), c.table.config.record_key)
        return len(paths), int(pc.sum(pc.less(table["n"], k)).as_py() or 0)

    files, hits = bench.step(f"read where {where} (1% of files)", read)
    spark.stop()
    check = "OK" if (files, hits) == (k, k) else f"FAIL: {files} files, {hits} rows, want {k}"
    bench.report.add(
        "files opened by that read", "files", {"lakebraid": files}, f"of {partitions:,}; {check}"
    )
    return [] if check == "OK" else [check]


def list_files(bench: Bench, url: str, partitions: int, runs: int) -> list[str]:
    """All data files from metadata (table opened afresh, in-process caches cleared) and by
    ``fs.find`` of the table folder (the table's own file system: no listings cache): one
    counted run each, then the median seconds of ``runs`` runs."""
    table = bench.open(url).table
    braid = f"/{BRAID_DIR}/"

    def metadata() -> int:
        return sum(len(files) for files in bench.open(url).files().values())

    def storage() -> int:
        found = table.fs.find(table.path)
        return sum(1 for p in found if p.endswith(".parquet") and braid not in p)

    seconds: dict[str, float] = {}
    wrong = []
    for name, lister in (("from metadata (files())", metadata), ("with fs.find", storage)):
        label = f"list {partitions:,} files {name}"
        clear_process_caches()
        found, counts, _ = bench.measure(label, lister)
        found, seconds[name] = median_timed(lister, runs, before=clear_process_caches)
        print(f"    median of {runs}: {seconds[name]:.4f} s, {found:,} files", flush=True)
        bench.add(label, counts)
        bench.report.add(label, "s", {"lakebraid": seconds[name]}, f"median of {runs}")
        if found != partitions:
            wrong.append(f"{label}: {found:,} files, want {partitions:,}")
    find, metadata_s = seconds["with fs.find"], seconds["from metadata (files())"]
    ratio = find / metadata_s if metadata_s > 0 else float("inf")
    verdict = f"goal >= {LISTING_GOAL:.0f}x: " + ("OK" if ratio >= LISTING_GOAL else "under goal")
    print(f"  fs.find / metadata: {ratio:.1f}x ({verdict})")
    check = "; ".join([verdict, *(f"FAIL {w}" for w in wrong)])
    bench.report.add("listing: fs.find / metadata", "x", {"lakebraid": ratio}, check)
    return wrong


# ---- the fault run -----------------------------------------------------------------------
FAULT_DAYS = 4  # few partitions: an upsert rewrites a few files, so operations stay quick
Model = dict[str, tuple[str, int, float]]  # key -> (day, ts, amount)
Operation = tuple[str, Any]  # ("upsert", rows) or ("delete", keys)


def fault_rows(keys: list[str], ts: int, rng: np.random.Generator) -> pa.Table:
    """Rows of the fault table for ``keys``: random days and amounts, precombine ``ts``."""
    days = np.array([f"2024-02-{d + 1:02d}" for d in range(FAULT_DAYS)], dtype=object)
    return pa.table(
        {
            "id": pa.array(keys, pa.string()),
            "day": pa.array(days[rng.integers(0, FAULT_DAYS, len(keys))].tolist(), pa.string()),
            "ts": pa.array(np.full(len(keys), ts, dtype=np.int64)),
            "amount": pa.array(np.round(rng.random(len(keys)) * 1000, 2)),
        }
    )


def as_model(rows: pa.Table) -> Model:
    return {r["id"]: (r["day"], r["ts"], r["amount"]) for r in rows.to_pylist()}


def draw(op: int, model: Model, rng: np.random.Generator) -> Operation:
    """Operation ``op``: 70% an upsert of 100 rows (50 keys the model holds, 50 new, any day:
    keys move between partitions) whose ``ts`` (op + 2) beats every earlier one, else a
    delete of 10 keys the model holds."""
    held = sorted(model)
    if rng.random() < 0.7:
        old = [held[i] for i in rng.choice(len(held), 50, replace=False).tolist()]
        new = uuid_keys(np.arange(10_000 + 50 * op, 10_050 + 50 * op)).to_pylist()
        return "upsert", fault_rows(new + old, op + 2, rng)
    return "delete", [held[i] for i in rng.choice(len(held), 10, replace=False).tolist()]


def run_faulty(bench: Bench, url: str, ops: int, model: Model, seed: int) -> Counter[str]:
    """``ops`` operations, each on the table opened afresh (the open may fail too); the model
    takes those that returned. Outcomes: "ok", and the failures by exception type."""
    rng = np.random.default_rng(seed)
    outcomes: Counter[str] = Counter()
    for op in range(ops):
        kind, what = draw(op, model, rng)
        try:
            c = bench.open(url)
            if kind == "upsert":
                c.upsert(what)
            else:
                c.delete(what)
        except Exception as exc:  # whatever failed: the operation is not in the model
            outcomes[type(exc).__name__] += 1
            continue
        outcomes["ok"] += 1
        if kind == "upsert":
            model.update(as_model(what))
        for key in what if kind == "delete" else []:
            model.pop(key, None)
    return outcomes


def fault_run(bench: Bench, ops: int, rate: float, seed: int) -> str:
    """The fault run on a fresh table of 1,000 rows; its check ("OK" or "FAIL")."""
    lb = bench.lb
    url = f"s3://{lb.new_bucket()}/faults"
    start = fault_rows(uuid_keys(np.arange(1000)).to_pylist(), 1, np.random.default_rng(seed))
    WriteClient.create(url, "id", ["day"], "ts", storage_options=bench.options).bulk_insert(start)
    model = as_model(start)
    faults, requests = lb.faults(), lb.counts()
    lb.inject(rate, seed)
    try:
        outcomes, seconds = timed(lambda: run_faulty(bench, url, ops, model, seed))
    finally:
        lb.inject(0.0)
    faults, requests = lb.faults() - faults, lb.counts() - requests
    ok = outcomes.pop("ok", 0)
    failed = ", ".join(f"{name} {n}" for name, n in outcomes.most_common()) or "none"
    injected = ", ".join(f"{kind} {faults[kind]}" for kind in ("503", "500", "reset", "lost"))
    among = f"{injected}; in {sum(requests.values()):,} requests"
    print(f"  operations ok {ok}, failed {ops - ok} ({failed}); {seconds:.1f} s")
    print(f"  faults injected {sum(faults.values())} ({among})")
    report = bench.report
    report.add(f"fault run: operations ok of {ops}", "ops", {"lakebraid": ok}, f"failed: {failed}")
    report.add("fault run: faults injected", "faults", {"lakebraid": sum(faults.values())}, among)
    report.add(f"fault run: {ops} operations", "s", {"lakebraid": seconds})
    return fault_check(bench, url, model)


def fault_check(bench: Bench, url: str, model: Model) -> str:
    """Faults off: ``recover()``, then the table's rows against the model and ``validate()``."""
    c = bench.open(url)
    recovered = c.recover()
    got = as_model(c.read_arrow().select(["id", "day", "ts", "amount"]))
    problems = c.validate()
    wrong = sum(1 for key in got.keys() | model.keys() if got.get(key) != model.get(key))
    verdict = "OK" if not wrong and not problems else "FAIL"
    detail = (
        f"{len(got):,} rows, model {len(model):,}, {wrong} keys differ; validate(): "
        f"{problems or '[]'}; recover() rolled back {len(recovered)}"
    )
    print(f"  table = model, validate() = []: {verdict} ({detail})")
    bench.report.add(
        "fault run: table = model, validate() = []", "check", {"lakebraid": verdict}, detail
    )
    return verdict


NOTES = [
    "object_store: requests as the proxy in front of moto counts them; each step once, on a "
    "table opened just before; seconds are those of moto on loopback, not of S3",
    "object_store: the 1% read is on the listing table (the main table has one file per day "
    "with default options); fs.find runs on the table's own file system (no listings cache)",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the main table")
    parser.add_argument("--partitions-listing", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3, help="runs per listing (median)")
    parser.add_argument("--faults", action="store_true", help="add the fault run")
    parser.add_argument("--fault-ops", type=int, default=200)
    parser.add_argument("--fault-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    n, partitions = args.rows, args.partitions_listing
    setup = (
        f"S3 on loopback (moto behind a counting proxy); {n:,} rows over {DAYS} day partitions, "
        f"UUID-like keys; a table of {partitions:,} one-file partitions; in-process engine"
    )
    report = Report("object_store", setup, notes=NOTES)
    with LoopbackS3() as lb:
        os.environ.update(lb.environment())  # before any Spark session (its Python workers)
        bench = Bench(lb, report)
        print(f"main table: {n:,} rows", flush=True)
        checks = [main_table(bench, f"s3://{lb.new_bucket()}/main", n)]
        report.add("main table read back = expected", "check", {"lakebraid": checks[0]})
        print(f"listing table: {partitions:,} partitions", flush=True)
        url = f"s3://{lb.new_bucket()}/listing"
        checks += listing_table(bench, url, partitions, args.runs)
        if args.faults:
            print(f"fault run: {args.fault_ops} operations, fault rate {args.fault_rate}")
            checks.append(fault_run(bench, args.fault_ops, args.fault_rate, args.seed))
    report.print()
    report.save(args.json)
    return 0 if all(c == "OK" for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
