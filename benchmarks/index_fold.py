"""Compaction of the record index: a record-index file slice folded in its base's stored form
(``metadata.indexfold``: keys stay packed, locations stay codes) beside the generic fold (keys
unpacked to text, the four location columns expanded, both encoded again), same data, same run.

The table: ``--rows`` rows (zero-padded ids over 30 day partitions, as ``upsert.py``) bulk
inserted, then ``--steps`` writes with inline compaction off, each an insert of ``rows / 40``
new keys and a delete of ``rows / 200`` random keys: every record-index file group gets a log of
entries and tombstones per write. Each run copies that table, clears the process caches and
times ``MetadataTable.compact`` of the ``record_index`` partition (every group folded, on the
metadata write threads); the stored and the generic fold alternate, ``--runs`` each, medians
reported. Both must leave the same index: every entry, read back through the metadata reader.

    .venv/bin/python benchmarks/index_fold.py [--rows N] [--steps S] [--runs R]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from benchlib import Report, clear_process_caches  # noqa: E402
from upsert import DAYS, make_rows  # noqa: E402

import lakebraid.metadata.table as metadata_table  # noqa: E402
from lakebraid.metadata.records import Partition  # noqa: E402
from lakebraid.metadata.table import MetadataTable  # noqa: E402
from lakebraid.writers.client import WriteClient  # noqa: E402

NO_INLINE = {"metadata.compact.max.log.files": 0}


def build(path: str, rows: int, steps: int, seed: int = 7) -> int:
    """The table of the module doc; returns its record-index entries."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows)
    WriteClient.create(path, "id", ["day"], "ts", **{"index.expected.records": rows})
    WriteClient.open(path).bulk_insert(make_rows(ids, ids % DAYS, 1, seed))
    alive = np.zeros(rows + steps * (rows // 40), dtype=bool)
    alive[:rows] = True
    top = rows
    for step in range(steps):
        fresh = np.arange(top, top + rows // 40)
        top += len(fresh)
        WriteClient.open(path, **NO_INLINE).bulk_insert(make_rows(fresh, fresh % DAYS, 2, step))
        alive[fresh] = True
        doomed = rng.choice(np.flatnonzero(alive), rows // 200, replace=False)
        keys = pa.array([f"key-{i:010d}" for i in doomed.tolist()], pa.string())
        WriteClient.open(path, **NO_INLINE).delete(pa.table({"id": keys}))
        alive[doomed] = False
    return int(np.count_nonzero(alive))


def index_digest(path: str) -> tuple[int, str]:
    """Entries and a digest of every record-index entry (key and location) of the table."""
    clear_process_caches()
    reader = MetadataTable(WriteClient.open(path).table).reader()
    part = Partition.RECORD_INDEX
    groups = [reader.group_table(part, i) for i in range(reader.group_count(part))]
    table = pa.concat_tables(groups).sort_by("key")
    digest = hashlib.sha256()
    for name in ("key", "partition", "file_id_hi", "file_id_lo", "instant"):
        digest.update(str(table.column(name).to_pylist()).encode())
    return table.num_rows, digest.hexdigest()[:16]


def fold(source: str, copy: str, stored: bool) -> tuple[float, tuple[int, str]]:
    """Seconds of one compaction of the record index of a fresh copy of ``source``."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    clear_process_caches()
    metadata = MetadataTable(WriteClient.open(copy).table)
    generic = mock.patch.object(metadata_table, "fold_stored", lambda *a: None)
    with contextlib.nullcontext() if stored else generic:
        started = time.perf_counter()
        done = metadata.compact([Partition.RECORD_INDEX])
        seconds = time.perf_counter() - started
    if done is None:
        raise RuntimeError("the compaction folded nothing")
    return seconds, index_digest(copy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lakebraid-fold-") as folder:
        source = f"{folder}/table"
        entries = build(source, args.rows, args.steps)
        print(f"  table: {entries:,} keys, {args.steps} logs per record-index group", flush=True)
        times: dict[bool, list[float]] = {True: [], False: []}
        digests = set()
        for run in range(args.runs):
            for stored in (run % 2 == 0, run % 2 != 0):
                seconds, digest = fold(source, f"{folder}/copy", stored)
                times[stored].append(seconds)
                digests.add(digest)
                name = "stored" if stored else "generic"
                print(f"  {name}: {seconds:.3f} s {digest}", flush=True)
    stored, generic = (statistics.median(times[k]) for k in (True, False))
    same = len(digests) == 1 and next(iter(digests))[0] == entries
    check = "OK" if same else f"FAIL: {sorted(digests)} for {entries:,} keys"
    report = Report("index_fold", f"{args.rows:,} rows, {args.steps} steps, {args.runs} runs")
    report.add(
        f"fold the record index ({entries:,} entries, {args.steps} logs a group)",
        "s",
        {"lakebraid": stored},
        f"{check}; generic fold {generic:.3g} s; generic / stored {generic / stored:.2f}x",
    )
    report.print()
    report.save(args.json)
    return 0 if check == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
