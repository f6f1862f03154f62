"""Calibration for the loopback S3 figures: the median latency of one LIST, PUT and GET on the
loopback server (moto behind the counting proxy) in an empty bucket, then after each round of
3,000 PUTs of 20 KB objects and 2,800 deletes. A benchmark whose requests per operation stay
level while its seconds grow can be read against it. Figures are printed. Run from the repo
root::

    .venv/bin/python benchmarks/moto_latency.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import fsspec  # noqa: E402

from lakebraid.writers.cli.loopback_s3 import LoopbackS3  # noqa: E402

BUCKET = "latency-probe"


def medians(fs: fsspec.AbstractFileSystem, label: str, n: int = 20) -> None:
    lists, puts, gets = [], [], []
    for i in range(n):
        start = time.perf_counter()
        fs.invalidate_cache()
        fs.ls(f"{BUCKET}/probe/", detail=False) if i else None
        lists.append(time.perf_counter() - start)
        start = time.perf_counter()
        fs.pipe_file(f"{BUCKET}/probe/p{i}", b"x" * 1000)
        puts.append(time.perf_counter() - start)
        start = time.perf_counter()
        fs.cat_file(f"{BUCKET}/probe/p{i}")
        gets.append(time.perf_counter() - start)
    ms = [statistics.median(v[1:]) * 1000 for v in (lists, puts, gets)]
    print(f"{label}: LIST {ms[0]:.1f} ms, PUT {ms[1]:.1f} ms, GET {ms[2]:.1f} ms", flush=True)


def main() -> int:
    with LoopbackS3() as lb:
        lb.new_bucket(BUCKET)
        fs = fsspec.filesystem("s3", **lb.storage_options(), skip_instance_cache=True)
        medians(fs, "empty bucket")
        for done in range(1, 4):
            for i in range(3000):
                fs.pipe_file(f"{BUCKET}/t/{done}/o{i}", b"y" * 20000)
            fs.rm([f"{BUCKET}/t/{done}/o{i}" for i in range(2800)])
            medians(fs, f"after {3000 * done:,} PUTs and {2800 * done:,} deletes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
