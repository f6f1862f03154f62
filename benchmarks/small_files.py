"""What one write of many one-file partitions costs below lakebraid: the floor under the
``listing`` benchmark's "write 5,000 partitions" row, measured beside delta-rs's whole write in
the same run.

The rows are ``listing.make_rows`` (``--partitions`` partitions of 4 rows, default 5,000), so
each partition is one small Parquet file. Timed, each the median of ``--runs`` rounds (default
3), every round writing into fresh folders under one temporary folder:

* delta-rs: ``write_deltalake(partition_by=["part"])``, the whole write (its commit included),
  the baseline of every ratio (lakebraid's whole write is ``listing``'s row);
* pyarrow, one thread: each partition's rows, sorted by key as lakebraid writes them, encoded
  as a Parquet file in memory by ``pq.write_table`` with lakebraid's data-file options
  (``WRITE_OPTIONS``, the local codec), one after another: the part of lakebraid's write that
  no Python around it can remove;
* pyarrow, threads: the same on a pool of one thread per core;
* pyarrow's dataset writer: ``pyarrow.dataset.write_dataset`` of the rows, partitioned by
  ``part`` into Hive folders on disk with the same options: Arrow's own C++ writer and thread
  pool, no Python per file;
* file creation: the encoded files' bytes written by Python into one new folder each
  (``mkdir``, ``open``, ``write``, ``close``; no fsync): the file system's share.

Each pyarrow and file-system row's ratio (delta-rs / it) is the best "write 5,000 partitions"
ratio lakebraid could reach if that step were all it did.

    .venv/bin/python benchmarks/small_files.py [--partitions N] [--runs R] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from benchlib import Report, in_turn, timed
from deltalake import write_deltalake
from listing import make_rows

from lakebraid.metadata.integrity import WRITE_OPTIONS
from lakebraid.writers.write.datafile import DATA_CODEC

OPTIONS = dict(WRITE_OPTIONS, compression=DATA_CODEC[True])
THREADS = os.cpu_count() or 1


def pieces(rows: pa.Table) -> list[pa.Table]:
    """Each partition's rows, sorted by key (as lakebraid's files hold them)."""
    ordered = rows.take(pc.sort_indices(rows, [("part", "ascending"), ("id", "ascending")]))
    ordered = ordered.combine_chunks()
    parts = ordered.column("part").to_numpy(zero_copy_only=False)
    starts = [0, *(np.flatnonzero(parts[1:] != parts[:-1]) + 1).tolist(), len(parts)]
    return [ordered.slice(a, b - a) for a, b in itertools.pairwise(starts)]


def encoded(piece: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    pq.write_table(piece, sink, **OPTIONS)
    return sink.getvalue()


def create_files(folder: str, files: list[pa.Buffer]) -> None:
    os.mkdir(folder)
    for i, data in enumerate(files):
        path = f"{folder}/part=p{i:05d}"
        os.mkdir(path)
        fd = os.open(f"{path}/0.parquet", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            os.write(fd, memoryview(data))
        finally:
            os.close(fd)


def dataset_write(rows: pa.Table, folder: str) -> None:
    options = ds.ParquetFileFormat().make_write_options(**OPTIONS)
    ds.write_dataset(
        rows,
        folder,
        format="parquet",
        file_options=options,
        partitioning=ds.partitioning(pa.schema([("part", pa.string())]), flavor="hive"),
        max_partitions=len(rows) + 1,
        max_open_files=len(rows) + 1,
    )


def works(rows: pa.Table) -> dict[str, Callable[[str], object]]:
    """The timed steps by row name, each given a fresh folder of its own."""
    parts = pieces(rows)
    files = [encoded(p) for p in parts]

    def threaded(_: str) -> None:
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(encoded, parts))

    return {
        "delta-rs": lambda at: write_deltalake(at, rows, partition_by=["part"]),
        "pyarrow, one thread": lambda _: [encoded(p) for p in parts],
        f"pyarrow, {THREADS} threads": threaded,
        "pyarrow's dataset writer": lambda at: dataset_write(rows, at),
        "file creation": partial(create_files, files=files),
    }


def measure(rows: pa.Table, runs: int) -> dict[str, float]:
    """Median seconds of each step; each round runs the steps in turn from a different one."""
    folder = tempfile.mkdtemp(prefix="lakebraid-small-files-")
    try:
        steps = works(rows)
        names = list(steps)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for run in range(runs):
            for name in in_turn(names, run):
                at = f"{folder}/{run}-{names.index(name)}"
                seconds[name].append(timed(partial(steps[name], at))[1])
                print(f"  {name}: {seconds[name][-1]:.3f} s", flush=True)
        return {name: statistics.median(found) for name, found in seconds.items()}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = make_rows(args.partitions, 4)
    found = measure(rows, args.runs)
    report = Report(
        "small_files",
        f"{args.partitions:,} partitions of 4 rows, one file each; median of {args.runs}",
    )
    count = f"{args.partitions:,}"
    report.add(
        f"delta-rs: write {count} partitions (one write)", "s", {"delta-rs": found["delta-rs"]}
    )
    for name in [n for n in found if n != "delta-rs"]:
        report.add(
            f"floor: {name}, {count} files",
            "s",
            {"lakebraid": found[name], "delta-rs": found["delta-rs"]},
        )
    report.notes.append(
        "floor rows: one step of a write (the lakebraid column times it alone); their ratio "
        "is the best the whole write could reach if that step were all it did; lakebraid's "
        "whole write is listing's 'write N partitions' row"
    )
    report.print()
    report.save(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
