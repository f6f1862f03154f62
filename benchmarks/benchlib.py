"""What every benchmark script shares: timing, result rows, the ``--json`` file, the peers'
setup (a pyiceberg SQL catalog on sqlite) and the one table format (Markdown) they print.

A result row is one operation measured on lakebraid and, where they offer it, on delta-rs
and pyiceberg. A value is a number in the row's unit, or a word: ``n/a`` (the system does
not offer the operation), ``skipped`` (left out by a flag), ``error: ...``, or a check
result (``OK`` / ``FAIL``). Ratios are peer / lakebraid: above 1 means lakebraid took less
time (or fewer bytes, or fewer files).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import clear_manifest_cache
from pyiceberg.table import Table as IcebergTable

from lakebraid import metadata

T = TypeVar("T")
SYSTEMS = ("lakebraid", "delta-rs", "pyiceberg")
PEERS = SYSTEMS[1:]
NA = "n/a"
SKIPPED = "skipped"
Value = float | str


@dataclass
class Row:
    """One operation; ``values`` maps a name of :data:`SYSTEMS` to a number or a word."""

    operation: str
    unit: str
    values: dict[str, Value]
    check: str = ""


@dataclass
class Report:
    """What one benchmark script hands to ``run_all.py``: its rows and what they include."""

    benchmark: str
    setup: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, operation: str, unit: str, values: Mapping[str, Value], check: str = "") -> Row:
        """``values`` by name of :data:`SYSTEMS`; a system left out is n/a."""
        unknown = set(values) - set(SYSTEMS)
        if unknown:
            raise ValueError(f"unknown systems {sorted(unknown)}")
        row = Row(operation, unit, {s: values.get(s, NA) for s in SYSTEMS}, check)
        self.rows.append(row)
        return row

    def save(self, path: str | None) -> None:
        if path:
            Path(path).write_text(json.dumps(asdict(self), indent=1))

    def print(self) -> None:
        print()
        print(markdown_table([self]))
        for note in self.notes:
            print(f"* {note}")


def load_report(path: str | Path) -> Report:
    raw = json.loads(Path(path).read_text())
    rows = [Row(**r) for r in raw.pop("rows")]
    return Report(rows=rows, **raw)


# ---- timing ------------------------------------------------------------------------------
def timed(work: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def cpu_timed(work: Callable[[], T]) -> tuple[T, float, float]:
    """``work()``'s result, wall seconds and CPU seconds of this process (user + system, every
    thread: a peer's native threads too). CPU time barely moves with what the file system
    costs at the moment (creating files on this project's disks is many times dearer for a
    minute or more after many deletions), so it shows a write's own work beside its wall time."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    result, seconds = timed(work)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result, seconds, cpu


def in_turn(items: Sequence[T], round_: int) -> list[T]:
    """``items`` in order, starting from the ``round_``-th (wrapping): each round of a
    comparison starts with the next system, so none always runs first."""
    start = round_ % len(items)
    return [*items[start:], *items[:start]]


def median_timed(
    work: Callable[[], T],
    runs: int,
    before: Callable[[], object] | None = None,
    warmup: int = 0,
) -> tuple[T, float]:
    """The last result and the median seconds of ``runs`` runs after ``warmup`` untimed ones;
    ``before`` runs untimed ahead of each (cache clearing)."""
    seconds, result = [], None
    for _ in range(warmup):
        if before is not None:
            before()
        work()
    for _ in range(runs):
        if before is not None:
            before()
        result, elapsed = timed(work)
        seconds.append(elapsed)
    return result, statistics.median(seconds)  # type: ignore[return-value]


def measure(
    works: Mapping[str, Callable[[], T]], runs: int, want: T
) -> tuple[dict[str, Value], str]:
    """Median seconds of each work (caches cleared before every run, see
    :func:`clear_process_caches`) and a check that each returned ``want``. Each work runs
    once untimed first: what a process pays once (a library's lazy set-up, such as sqlglot
    building its tokenizer on the first parse, ~20 ms) is not a read's cost, for any system."""
    seconds: dict[str, Value] = {}
    wrong = []
    for name, work in works.items():
        got, elapsed = median_timed(work, runs, before=clear_process_caches, warmup=1)
        seconds[name] = elapsed
        if got != want:
            wrong.append(f"{name} got {got}")
        print(f"  {name}: {elapsed:.4f} s -> {got}", flush=True)
    return seconds, "OK" if not wrong else "FAIL: " + "; ".join(wrong)


# Importing lakebraid sets glibc's malloc to keep freed memory and makes jemalloc pyarrow's pool
# (``writers/engine/memory.py``): process-wide choices that would also change how a peer in the
# same process allocates. A peer timed in a process of its own runs with these set, so its
# import of lakebraid changes nothing: each system as its users run it.
PEER_ENVIRONMENT = {"LAKEBRAID_MALLOC": "keep", "LAKEBRAID_ARROW_POOL": "keep"}


def own_process(script: str, args: Sequence[str], system: str) -> str:
    """The last line ``script`` prints when run with ``args`` in a new Python process, for
    ``system``: a peer's process gets :data:`PEER_ENVIRONMENT` (its allocators as the peer's
    users have them), lakebraid's its own choices. A failure raises with the process's
    output."""
    environ = dict(os.environ)
    if system != SYSTEMS[0]:
        environ.update(PEER_ENVIRONMENT)
    command = [sys.executable, script, *args]
    done = subprocess.run(command, capture_output=True, text=True, env=environ)
    if done.returncode != 0:
        raise RuntimeError(
            f"{system}: {' '.join(command)} exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
    return done.stdout.strip().splitlines()[-1]


def report_and_exit(line: str) -> NoReturn:
    """In a system's own process: print its result ``line`` and end the process at once,
    without the interpreter's teardown: a delta-rs process (deltalake with pyarrow's mimalloc
    pool) that had printed its results sometimes aborted in teardown ("terminate called
    without an active exception", exit -6), which no result depends on."""
    print(line, flush=True)
    sys.stderr.flush()
    os._exit(0)


def median_of_runs(
    path: str, write: Callable[[str], object], runs: int, own_time: bool = False
) -> float:
    """The median seconds of ``runs`` runs of ``write`` on the table at ``path``: before each,
    the table is put back as it was (a copy set aside before the first), so every run writes
    the same table at the same path and a process's caches of its (immutable, uniquely named)
    files stay warm, as for a long-running writer. The last run's write is kept.
    ``own_time``: ``write`` returns the seconds to count (a new process's own timing)."""
    aside = f"{path}-aside"

    def put_back() -> None:
        if os.path.exists(aside):
            shutil.rmtree(path)
            os.rename(aside, path)
        shutil.copytree(path, aside)

    def sample() -> float:
        put_back()
        if own_time:
            return float(write(path))  # type: ignore[arg-type]
        return timed(lambda: write(path))[1]

    seconds = statistics.median(sample() for _ in range(runs))
    shutil.rmtree(aside)
    return seconds


def clear_process_caches() -> None:
    """Forget what earlier reads left in this process: lakebraid's metadata footer and log
    caches and pyiceberg's manifest cache (delta-rs keeps nothing between table opens). The
    OS page cache stays warm."""
    metadata.basefile.FOOTERS.clear()
    metadata.logcache.LOGS.clear()
    clear_manifest_cache()


# ---- pyiceberg -----------------------------------------------------------------------------
def iceberg_catalog(folder: str) -> SqlCatalog:
    """A local SQL catalog (sqlite file) with a file warehouse, both under ``folder``, and a
    ``bench`` namespace."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(
        "bench", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}/warehouse"
    )
    catalog.create_namespace("bench")
    return catalog


def iceberg_table(
    catalog: SqlCatalog, name: str, schema: Any, partition_by: Sequence[str] = ()
) -> IcebergTable:
    """``bench.<name>`` with ``schema`` (a pyarrow schema), identity-partitioned by
    ``partition_by``."""
    table = catalog.create_table(f"bench.{name}", schema=schema)
    if partition_by:
        with table.update_spec() as spec:
            for column in partition_by:
                spec.add_identity(column)
    return catalog.load_table(f"bench.{name}")


# ---- the table -----------------------------------------------------------------------------
def cell(value: Value, unit: str) -> str:
    if isinstance(value, str):
        return value
    if unit == "s":
        digits = 1 if value >= 10 else 2 if value >= 1 else 3 if value >= 0.01 else 4
        return f"{value:.{digits}f}"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.2f}"


def ratio(peer: Value, ours: Value) -> str:
    if isinstance(peer, str) or isinstance(ours, str) or ours <= 0:
        return ""
    return f"{peer / ours:.2f}x"


HEADER = [
    "benchmark",
    "operation",
    "unit",
    *SYSTEMS,
    *(f"{p} / lakebraid" for p in PEERS),
    "check",
]


def markdown_table(reports: Sequence[Report]) -> str:
    """One Markdown table of every row of ``reports``, columns padded for a terminal."""
    lines = [HEADER]
    for report in reports:
        for row in report.rows:
            values = [row.values.get(s, NA) for s in SYSTEMS]
            ours = row.values.get("lakebraid", NA)
            lines.append(
                [
                    report.benchmark,
                    row.operation,
                    row.unit,
                    *(cell(v, row.unit) for v in values),
                    *(ratio(row.values.get(p, NA), ours) for p in PEERS),
                    row.check,
                ]
            )
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    numeric = {i for i, name in enumerate(HEADER) if name in SYSTEMS or "/" in name}

    def text(line: list[str]) -> str:
        cells = [
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        return "| " + " | ".join(cells) + " |"

    rule = ["-" * (w - 1) + ":" if i in numeric else "-" * w for i, w in enumerate(widths)]
    return "\n".join([text(lines[0]), text(rule), *(text(line) for line in lines[1:])])
