"""``make bench``: every benchmark at a size that fits a 2-core machine, then one table.

Runs each script in its own process with ``--json``, gathers the rows into one table --
lakebraid beside delta-rs and pyiceberg with the ratios peer / lakebraid (> 1: lakebraid is
faster, or smaller) -- prints it and writes it to ``benchmarks/RESULTS.md`` with the date, the
machine, the versions and the command. ``--quick`` runs small sizes (a check that it all works,
not figures to keep: no file is written unless ``--out`` names one).

    .venv/bin/python benchmarks/run_all.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from benchlib import Report, load_report, markdown_table

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUNS = {
    "record_index": ["record_index.py", "--keys", "10000000", "--scale-keys", "0"],
    "index_fold": ["index_fold.py", "--rows", "4000000", "--steps", "4"],
    "upsert": ["upsert.py", "--rows", "1000000"],
    # issue 4's workload; pyiceberg's upsert would take minutes at this size
    "upsert-10m": ["upsert.py", "--rows", "10000000", "--skip-iceberg", "--repeat", "3"],
    # issue 15: merge-on-read beside copy-on-write and delta-rs on the 10M-row workload
    "merge_on_read": ["merge_on_read.py", "--rows", "10000000"],
    # issue 17: the same workload through the Spark engine on local[2], beside the in-process one
    "spark_engine": ["spark_engine.py", "--rows", "10000000"],
    "listing": ["listing.py", "--partitions", "5000"],
    # the floor under listing's 5,000-partition write: pyarrow's encoding and file creation
    # alone, beside delta-rs's whole write
    "small_files": ["small_files.py", "--partitions", "5000"],
    "skipping": ["skipping.py", "--rows", "2000000", "--files", "100"],
    # the fixed cost of a commit (one-row appends) and what it does, beside delta-rs
    "commit_anatomy": ["commit_anatomy.py"],
    "secondary": ["secondary.py", "--rows", "10000000"],
    "footprint": ["bulk_footprint.py", "--rows", "10000000"],
    # the marks; building 5,000 commits takes most of this row's half hour
    "history": ["history.py", "--at", "1,10,100,1000,5000"],
    # the same on the loopback S3 server, requests by kind (1.5-2 s per upsert); to commit 100
    # only: moto's LIST slows as its bucket fills (benchmarks/moto_latency.py), so later marks
    # measure the server more than lakebraid
    "history-s3": ["history.py", "--s3", "--at", "1,10,100", "--runs", "5"],
    # a loopback S3 server (moto); the fault run's 200 operations take most of its time
    "object_store": [
        "object_store.py",
        "--rows",
        "1000000",
        "--partitions-listing",
        "5000",
        "--faults",
        "--fault-ops",
        "200",
    ],
}
QUICK = {
    "record_index": ["record_index.py", "--keys", "300000", "--scale-keys", "0"],
    "index_fold": ["index_fold.py", "--rows", "200000", "--steps", "2", "--runs", "2"],
    "upsert": ["upsert.py", "--rows", "50000"],
    "merge_on_read": ["merge_on_read.py", "--rows", "50000"],
    "spark_engine": ["spark_engine.py", "--rows", "50000"],
    "listing": ["listing.py", "--partitions", "200", "--runs", "3"],
    "small_files": ["small_files.py", "--partitions", "200", "--runs", "2"],
    "skipping": ["skipping.py", "--rows", "100000", "--files", "20"],
    "commit_anatomy": ["commit_anatomy.py", "--warm", "3", "--commits", "3", "--counted", "2"],
    "secondary": ["secondary.py", "--rows", "200000", "--file-rows", "10000"],
    "footprint": ["bulk_footprint.py", "--rows", "200000"],
    "history": ["history.py", "--at", "1,20", "--runs", "3"],
    "history-s3": ["history.py", "--s3", "--at", "1,5", "--runs", "2"],
    "object_store": [
        "object_store.py",
        "--rows",
        "20000",
        "--partitions-listing",
        "200",
        "--faults",
        "--fault-ops",
        "10",
    ],
}
PACKAGES = ["pyspark", "pyarrow", "deltalake", "pyiceberg", "fsspec", "msgspec", "numpy"]


def run(name: str, command: list[str], folder: str) -> tuple[Report, float, int]:
    """Run one script: its report (or a report of its failure), seconds and exit code."""
    out = Path(folder) / f"{name}.json"
    script, *args = command
    print(f"== {script} {' '.join(args)}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(HERE / script), *args, "--json", str(out)], check=False
    )
    seconds = time.perf_counter() - started
    print(f"== {script}: exit {done.returncode} after {seconds:.0f} s", flush=True)
    if out.exists():
        report = load_report(out)
        if done.returncode:
            report.notes.append(f"{name}: exit code {done.returncode} (a check failed)")
        return report, seconds, done.returncode
    failed = Report(name, "did not finish")
    failed.add("(script failed)", "", {}, f"exit code {done.returncode}, see its output")
    return failed, seconds, done.returncode or 1


# ---- the machine ---------------------------------------------------------------------------
def proc_field(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def command_output(*command: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    except OSError:
        return "?"
    if done.returncode:
        return "?"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else ""


def machine() -> list[str]:
    memory = proc_field("/proc/meminfo", "MemTotal")
    gib = f"{int(memory.split()[0]) / 2**20:.1f} GiB" if memory[:1].isdigit() else memory
    versions = []
    for package in PACKAGES:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    commit = command_output("git", "rev-parse", "--short", "HEAD")
    dirty = command_output("git", "status", "--porcelain", "--untracked-files=no")
    return [
        f"CPU: {proc_field('/proc/cpuinfo', 'model name')}, {os.cpu_count()} cores; "
        f"memory {gib}; {platform.system()} {platform.release()}",
        f"Python {platform.python_version()}; Java: {java_version()}; " + ", ".join(versions),
        f"lakebraid at commit {commit}"
        + (" (with uncommitted changes in the working tree)" if dirty not in ("", "?") else ""),
    ]


def java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    except OSError:
        return "not found"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else "?"


def command_text(argv: list[str]) -> str:
    plain = shlex.join([".venv/bin/python", "benchmarks/run_all.py", *argv])
    return f"make bench ({plain})" if os.environ.get("MAKELEVEL") else plain


def results_markdown(
    reports: list[Report],
    argv: list[str],
    started: dt.datetime,
    wall: dict[str, float],
    load_before: tuple[float, float, float],
) -> str:
    load = os.getloadavg()
    lines = [
        "# lakebraid benchmarks beside delta-rs and pyiceberg",
        "",
        f"Run {started:%Y-%m-%d %H:%M} UTC with `{command_text(argv)}`; "
        f"{sum(wall.values()) / 60:.1f} minutes in all "
        f"({', '.join(f'{k} {v:.0f} s' for k, v in wall.items())}); "
        f"load average (1/5/15 min) {load_before[0]:.1f} / {load_before[1]:.1f} / "
        f"{load_before[2]:.1f} at the start, {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        "at the end: on a machine others use, figures follow its load.",
        "",
        *(f"* {line}" for line in machine()),
        "",
        "Every system runs on the same data in the same process run, on local disk. Times are "
        "seconds; **ratios are peer / lakebraid: above 1 means lakebraid is faster** (or "
        "smaller, or reads fewer files). `n/a`: the peer does not offer the operation.",
        "",
        markdown_table(reports),
        "",
        "## What each number includes",
        "",
        *(line for report in reports for line in describe(report)),
        "Regenerate with `make bench`; each script also runs alone (see its `--help`).",
        "",
    ]
    return "\n".join(lines)


def describe(report: Report) -> list[str]:
    """The report's setup and notes (each note starts ``<benchmark>: ``) as a list."""
    prefix = f"{report.benchmark}: "
    notes = [n.removeprefix(prefix) for n in report.notes]
    return [f"**{report.benchmark}**: {report.setup}.", "", *(f"* {n}" for n in notes), ""]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a check, not figures")
    parser.add_argument("--only", action="append", choices=sorted(RUNS), help="run just these")
    parser.add_argument("--out", default=None, help="Markdown file to write the table to")
    args = parser.parse_args(argv)
    runs = QUICK if args.quick else RUNS
    out = Path(args.out) if args.out else None if args.quick else HERE / "RESULTS.md"
    started, load_before = dt.datetime.now(dt.UTC), os.getloadavg()
    reports, wall, codes = [], {}, []
    with tempfile.TemporaryDirectory(prefix="lakebraid-bench-json-") as folder:
        for name, command in runs.items():
            if args.only and name not in args.only:
                continue
            report, wall[name], code = run(name, command, folder)
            reports.append(report)
            codes.append(code)
    print()
    print("Ratios are peer / lakebraid: above 1 means lakebraid is faster (or smaller).")
    print(markdown_table(reports))
    print(f"total wall time {sum(wall.values()):.0f} s")
    if out is not None:
        out.write_text(results_markdown(reports, argv, started, wall, load_before))
        print(f"written to {out}")
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.exit(main())
