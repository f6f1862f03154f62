"""The Spark engine beside the in-process engine: the workload of ``upsert.py`` (bulk insert of
N rows over 30 days, an upsert of N/10 half new, 1,000 updates in one day, a delete of 10,000
keys) on two lakebraid tables, same run.

* in-process: Arrow tables in the driver (as ``upsert.py``), before any Spark session;
* Spark: ``spark.read.parquet`` of the same rows (written to Parquet before any timing) with
  ``write.inprocess.max.rows=0``, so every write is the Spark pipeline
  (``writers.engine.spark.pipeline``) on ``local[2]``; the delete gets a Spark DataFrame of
  keys. The session and a first Spark job start before the timing.

Each step opens its table afresh inside the timing. A sampler reads the resident set of every
process of the run from ``/proc`` ten times a second; each row reports the peak of the driver
(this Python process, with what the step added to its resident set in brackets: a process
keeps freed heap, so its peak also holds what earlier steps left), of Spark's JVM and of the
largest Python worker (``pyspark.daemon`` and its forks) during the step. At the end both
tables are read whole and compared with the expected rows (``upsert.expected``).

The mixed upsert (the Spark engine's goal: at most 2.5x the in-process engine) is then timed
``--runs`` more times on each engine (default 3), the engines in turn and the first alternating
round by round, each run on its table put back as it was before the step (a copy set aside
then): the machine's speed drifts by a third within minutes, and the single runs above are
minutes apart. Its row reports the medians of those runs (the Spark session is open for both
engines' runs: an idle session did not slow the in-process engine, 2.4-2.9 s either way) and
the single runs beside them.

    .venv/bin/python benchmarks/spark_engine.py [--rows N] [--runs R] [--json F]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
from benchlib import Report, in_turn, timed
from upsert import DAYS, Steps, digest, expected, step_names, workload

from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine.spark.session import embedded_session

PAGE = os.sysconf("SC_PAGE_SIZE")
KINDS = ("driver", "jvm", "worker")
MIB = 1 << 20
GROWTH = "driver growth"  # the driver's peak less its resident set when the step began
BEFORE_MIXED = "-before-mixed"  # a table's copy as it was before the mixed upsert


def _rss(pid: str) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _family(root: int) -> dict[int, str]:
    """pid -> kind of ``root`` and every process below it."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = {root: "driver"}
    grown = True
    while grown:
        below = {p for p, parent in parents.items() if parent in found and p not in found}
        for pid in below:
            command = commands.get(pid, b"")
            found[pid] = "jvm" if b"java" in command.split(b"\0")[0] else "worker"
        grown = bool(below)
    return found


class Sampler:
    """Peak resident bytes per process kind while :meth:`step` is open."""

    def __init__(self) -> None:
        self.peaks = dict.fromkeys(KINDS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for pid, kind in _family(os.getpid()).items():
                try:
                    self.peaks[kind] = max(self.peaks[kind], _rss(str(pid)))
                except OSError:
                    continue

    @contextmanager
    def step(self) -> Iterator[dict[str, int]]:
        self.peaks = dict.fromkeys(KINDS, 0)
        got: dict[str, int] = {GROWTH: -_rss(str(os.getpid()))}
        yield got
        self._stop.wait(0.2)  # one more sample after the step
        got.update(self.peaks)
        got[GROWTH] += got["driver"]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def run_engine(
    path: str, data: Steps, sources: dict[str, object], sampler: Sampler, **options: object
) -> tuple[dict[str, float], dict[str, dict[str, int]], Callable[[], object]]:
    """Seconds and peak memory of each step on a new table at ``path``."""
    WriteClient.create(path, "id", ["day"], "ts", **{"index.expected.records": len(data["bulk"])})
    spark = options.pop("spark", None)

    def load() -> WriteClient:
        return WriteClient.open(path, spark, **options)  # type: ignore[arg-type]

    actions: dict[str, Callable[[], object]] = {
        "bulk": lambda: load().bulk_insert(sources["bulk"]),
        "mixed": lambda: load().upsert(sources["mixed"]),
        "small": lambda: load().upsert(sources["small"]),
        "deletes": lambda: load().delete(sources["deletes"]),
    }
    seconds, memory = {}, {}
    for key, action in actions.items():
        if key == "mixed":
            shutil.copytree(path, f"{path}{BEFORE_MIXED}")  # put back by ``alternated``
        with sampler.step() as peaks:
            seconds[key] = timed(action)[1]
        memory[key] = peaks
        print(f"  {key}: {seconds[key]:.2f} s, peaks {describe(peaks)}", flush=True)
    return seconds, memory, lambda: load().read_arrow()


def alternated(
    upserts: dict[str, tuple[str, Callable[[str], object]]], runs: int
) -> dict[str, float]:
    """Median seconds of ``runs`` runs of each engine's mixed upsert (name -> its table's
    path and the upsert of a path), the engines in turn, the first alternating round by
    round; before each run the table is put back as it was before the step (the copy
    :func:`run_engine` set aside), at its own path, so the process's caches stay warm."""
    samples: dict[str, list[float]] = {name: [] for name in upserts}
    names = list(upserts)
    for turn in range(runs):
        for name in in_turn(names, turn):
            path, upsert = upserts[name]
            shutil.rmtree(path)
            shutil.copytree(f"{path}{BEFORE_MIXED}", path)
            samples[name].append(timed(lambda p=path, u=upsert: u(p))[1])
            print(f"  {name} mixed upsert again: {samples[name][-1]:.2f} s", flush=True)
    return {name: statistics.median(got) for name, got in samples.items()}


def describe(peaks: dict[str, int]) -> str:
    shown = [f"{kind} {peaks[kind] / MIB:,.0f} MiB" for kind in KINDS if peaks.get(kind)]
    if peaks.get("driver") and GROWTH in peaks:  # what the step added to the driver
        shown[0] += f" (+{max(0, peaks[GROWTH]) / MIB:,.0f})"
    return ", ".join(shown) or "none sampled"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=3, help="alternated runs of the upsert")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="lakebraid-bench-spark-")
    sampler = Sampler()
    try:
        data = workload(args.rows)
        for key, table in data.items():  # the Spark engine's inputs, as a pipeline finds them
            pq.write_table(table, f"{folder}/{key}.parquet")
        print("in-process engine (no Spark session yet)", flush=True)
        local = run_engine(f"{folder}/inprocess", data, dict(data), sampler)
        spark = embedded_session(master=args.master)
        frames = {key: spark.read.parquet(f"{folder}/{key}.parquet") for key in data}
        frames["small"].count()  # the JVM, the session and a first job outside the timing
        print(f"Spark engine on {args.master}", flush=True)
        cluster = run_engine(
            f"{folder}/spark", data, frames, sampler, spark=spark, **{"write.inprocess.max.rows": 0}
        )
        want = digest(expected(data))
        checks = {name: digest(run[2]()) == want for name, run in (("in", local), ("sp", cluster))}
        verdict = "OK" if all(checks.values()) else f"FAIL {checks}"
        options = {"write.inprocess.max.rows": 0}
        again = alternated(
            {
                "in-process": (
                    f"{folder}/inprocess",
                    lambda p: WriteClient.open(p).upsert(data["mixed"]),
                ),
                "Spark": (
                    f"{folder}/spark",
                    lambda p: WriteClient.open(p, spark, **options).upsert(frames["mixed"]),
                ),
            },
            args.runs,
        )
        report = Report(
            "spark_engine",
            f"{args.rows:,} rows over {DAYS} day partitions (upsert.py's workload), {args.master}",
            notes=[
                "spark_engine: lakebraid only; each step's time on the Spark engine, then in the "
                "check column the in-process engine's time, their ratio and peak resident memory "
                "per process (driver = the Python process, jvm = Spark's, worker = the largest "
                "Python worker), sampled every 0.1 s",
                "spark_engine: the Spark inputs are Parquet files read by spark.read.parquet "
                "(written before any timing); the delete's keys are a Spark DataFrame",
                f"spark_engine: the mixed upsert's row: the medians of {args.runs} more runs of "
                "it per engine, the engines alternated, each on its table put back as it was "
                "before the step (the single runs, minutes apart, in its check column)",
            ],
        )
        for key, name in step_names(data).items():
            spark_s, local_s = cluster[0][key], local[0][key]
            note = (
                f"{verdict}; in-process {local_s:.3g} s ({describe(local[1][key])}); "
                f"Spark / in-process {spark_s / local_s:.2f}x; Spark peaks "
                f"{describe(cluster[1][key])}"
            )
            if key == "mixed":
                spark_s, local_s = again["Spark"], again["in-process"]
                note = (
                    f"{verdict}; medians of {args.runs} alternated runs: in-process "
                    f"{local_s:.3g} s, Spark / in-process {spark_s / local_s:.2f}x; first runs: "
                    f"Spark {cluster[0][key]:.3g} s, in-process {local[0][key]:.3g} s "
                    f"({cluster[0][key] / local[0][key]:.2f}x); peaks (first runs) in-process "
                    f"{describe(local[1][key])}, Spark {describe(cluster[1][key])}"
                )
            report.add(f"Spark engine: {name}", "s", {"lakebraid": spark_s}, note)
        report.print()
        report.save(args.json)
        return 0 if verdict == "OK" else 1
    finally:
        sampler.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
