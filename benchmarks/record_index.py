"""Record index benchmark: build, size on disk and lookups of a large metadata record index.

Builds a lakebraid table in a temporary folder, loads a record index of ``--keys`` random
UUID4 keys with ``lakebraid.index.reindex.reindex_record_index`` and prints:

* the build time and the number of file groups (estimated, 1M records per group);
* the bytes per entry of the record-index base files on disk (Hudi RFC-8 reports 50-55);
* lookups with ``lakebraid.index.lookup.lookup(MetadataTable(table).reader(), keys)`` of
  100k existing + 10k absent keys, cold (footer and log caches cleared, OS page cache dropped
  when we may) and warm, with a correctness check and the read mode (seek / scan) of every
  file group;
* lookups of 100 and 1,000 keys, ``lakebraid.index.lookup.locations(reader, keys)`` of the
  110k keys, and the 110k lookup against a 1M-key index to show how it scales.

Figures are printed, never asserted; lookup times come with the CPU time of the process (all
threads), as wall times on a shared machine follow its load. Run from the repo root::

    .venv/bin/python benchmarks/record_index.py            # 10M keys (under a minute)
    .venv/bin/python benchmarks/record_index.py --quick    # 1M keys
    .venv/bin/python benchmarks/record_index.py --row-group-rows 2048   # another row group size
    .venv/bin/python benchmarks/record_index.py --keep /tmp/ri   # build once, reuse after
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from benchlib import Report, clear_process_caches  # noqa: E402

from lakebraid.index import lookup as index_lookup  # noqa: E402
from lakebraid.index.reindex import reindex_record_index, reshard  # noqa: E402
from lakebraid.index.sizing import estimate_groups  # noqa: E402
from lakebraid.metadata.arrow_records import index_table  # noqa: E402
from lakebraid.metadata.records import Partition, file_id_to_ints, instant_to_int  # noqa: E402
from lakebraid.metadata.table import MetadataTable  # noqa: E402
from lakebraid.timeline.table import TableTimelines  # noqa: E402
from lakebraid.timeline.table_config import FieldSpec, TableConfig  # noqa: E402

T = TypeVar("T")
PARTITIONS = [f"day=2024-01-0{d}" for d in range(1, 8)]
FILE_IDS = 300
INSTANT = "20240107123456789"
EXISTING, ABSENT = 100_000, 10_000
HYPHENS = (8, 13, 18, 23)
RFC8_BYTES = "50-55"
GOAL_BYTES, GOAL_COLD_S = 25.0, 1.0


# ---- keys ----------------------------------------------------------------------------------
def uuid4_strings(n: int, rng: np.random.Generator) -> pa.Array:
    """``n`` random version-4 UUID strings (canonical: lowercase, hyphenated), vectorised:
    random bytes, version and variant bits set, each byte looked up as two hex digits, and the
    digits copied around the hyphens into one byte matrix, the data buffer of an Arrow array."""
    raw = np.frombuffer(rng.bytes(16 * n), dtype=np.uint8).reshape(n, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40  # version 4
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80  # variant 10xx (RFC 4122)
    pairs = np.array([f"{b:02x}".encode() for b in range(256)], dtype="S2").view(np.uint16)
    hexes = pairs[raw].view(np.uint8)  # (n, 32): two digits per byte, in order
    text = np.full((n, 36), ord("-"), dtype=np.uint8)
    start = 0
    for lo, hi in zip((0, *[h + 1 for h in HYPHENS]), (*HYPHENS, 36), strict=True):
        text[:, lo:hi] = hexes[:, start : start + hi - lo]
        start += hi - lo
    large = 36 * n >= 2**31  # int32 offsets up to about 59M keys
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int64 if large else np.int32)
    kind = pa.large_string() if large else pa.string()
    keys = pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])
    return keys.cast(pa.string()) if large else keys


def check_uuid4(keys: pa.Array, sample: int = 1000) -> None:
    """A few keys through the standard library: canonical version-4 UUIDs."""
    for key in keys.slice(0, sample).to_pylist():
        parsed = uuid.UUID(key)
        if str(parsed) != key or parsed.version != 4:
            raise SystemExit(f"bad UUID4 generated: {key}")


# ---- table ---------------------------------------------------------------------------------
def new_table(path: str, options: dict[str, object]) -> TableTimelines:
    config = TableConfig(
        name="bench",
        record_key="id",
        partition_fields=["day"],
        precombine_field="ts",
        schema=[
            FieldSpec("id", "string", False),
            FieldSpec("day", "string"),
            FieldSpec("ts", "int64"),
        ],
    )
    return TableTimelines.create(path, config, options)


@dataclass
class Index:
    """A built record index and what the benchmark needs to check lookups."""

    n: int
    table: TableTimelines
    keys: pa.Array
    part_idx: np.ndarray  # partition of key i (index into PARTITIONS)
    file_idx: np.ndarray  # file id of key i (index into file_ids)
    file_ids: list[str]
    figures: dict[str, str] = field(default_factory=dict)
    numbers: dict[str, float] = field(default_factory=dict)  # for --json
    checks: dict[str, str] = field(default_factory=dict)
    probe: tuple[pa.Array, pa.Table, pa.Array] | None = None  # asked, expected, absent


def timed(work: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = work()
    return result, time.perf_counter() - start


def build_index(n: int, folder: str, rng: np.random.Generator, options: dict[str, object]) -> Index:
    """The index of ``n`` keys in ``folder/table``; a table already there (``--keep``) is
    reused: the keys and locations come again from the same seed, only the reindex is
    skipped."""
    keys, t_keys = timed(lambda: uuid4_strings(n, rng))
    check_uuid4(keys)
    file_ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(FILE_IDS)]
    part_idx = rng.integers(0, len(PARTITIONS), size=n, dtype=np.int32)
    file_idx = rng.integers(0, FILE_IDS, size=n, dtype=np.int32)

    def rows() -> pa.Table:
        partitions = pa.array(PARTITIONS).take(pa.array(part_idx))
        ids = pa.DictionaryArray.from_arrays(pa.array(file_idx), pa.array(file_ids))
        return index_table(keys, partitions, ids, INSTANT)

    reuse = os.path.isdir(f"{folder}/table/.braid")
    if reuse:
        lake, t_rows, t_build = TableTimelines.open(f"{folder}/table"), 0.0, float("nan")
        meta = MetadataTable(lake)
    else:
        table, t_rows = timed(rows)
        lake = new_table(f"{folder}/table", options)
        meta = MetadataTable(lake)
        start = time.perf_counter()
        reindex_record_index(meta, table)
        t_build = time.perf_counter() - start
        del table
    index = Index(n, lake, keys, part_idx, file_idx, file_ids)
    groups = meta.reader().group_count(Partition.RECORD_INDEX)
    folder_ri = meta.reader().folder(Partition.RECORD_INDEX)
    sizes = [
        int(entry["size"])
        for entry in lake.fs.ls(folder_ri, detail=True)
        if str(entry["name"]).endswith(".parquet")
    ]
    per_entry = sum(sizes) / n
    index.numbers.update({"build": t_build, "bytes": per_entry})
    print(
        f"[{n:,} keys] keys generated in {t_keys:.2f} s, rows built in {t_rows:.2f} s, "
        f"reindex (write {len(sizes)} bases) in "
        f"{'(reused: ' + folder + ')' if reuse else f'{t_build:.2f} s'}; {groups} file groups "
        f"(estimate {estimate_groups(lake.options, n)}); {sum(sizes) / 2**20:.1f} MiB on disk = "
        f"{per_entry:.2f} bytes per entry"
    )
    index.figures.update(
        {
            "build (reindex) s": f"{t_build:.2f}",
            "file groups": str(groups),
            "base files MiB": f"{sum(sizes) / 2**20:.1f}",
            "bytes per entry": f"{per_entry:.2f}",
        }
    )
    return index


# ---- lookups -------------------------------------------------------------------------------
def drop_caches() -> bool:
    """Clear the footer and log caches and drop the OS page cache; False if the OS refused."""
    clear_process_caches()
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def expected_rows(index: Index, positions: np.ndarray) -> pa.Table:
    """key, partition, file_id_hi, file_id_lo of the keys at ``positions``, sorted by key."""
    pairs = np.array([file_id_to_ints(f) for f in index.file_ids], dtype=np.int64)
    files = index.file_idx[positions]
    table = pa.table(
        {
            "key": index.keys.take(pa.array(positions)),
            "partition": pa.array(PARTITIONS).take(pa.array(index.part_idx[positions])),
            "file_id_hi": pa.array(pairs[files, 0]),
            "file_id_lo": pa.array(pairs[files, 1]),
        }
    )
    return table.sort_by("key")


def check_lookup(found: pa.Table, expected: pa.Table, absent: pa.Array) -> str:
    problems = []
    if found.num_rows != expected.num_rows:
        problems.append(f"{found.num_rows} rows found, {expected.num_rows} expected")
    leaked = int(pc.sum(pc.is_in(found.column("key"), value_set=absent)).as_py() or 0)
    if leaked:
        problems.append(f"{leaked} absent keys found")
    if not problems:
        got = found.select(expected.column_names).sort_by("key")
        if not got.equals(expected):
            problems.append("found rows differ from the expected locations")
        instants = pc.unique(found.column("instant")).to_pylist()
        if instants != [instant_to_int(INSTANT)]:
            problems.append(f"instants {instants}")
    return "OK" if not problems else "FAIL (" + "; ".join(problems) + ")"


def modes_text(modes: dict[str, str]) -> str:
    counts = collections.Counter(modes.values())
    return ", ".join(f"{mode} x{count}" for mode, count in sorted(counts.items()))


@dataclass
class Lookup:
    found: pa.Table
    wall: float
    cpu: float  # of every thread of the process
    modes: str
    dropped: bool  # the OS page cache was dropped before


def lookup_once(index: Index, keys: pa.Array, *, cold: bool) -> Lookup:
    """``lakebraid.index.lookup.lookup`` of ``keys`` on a fresh reader, timed from the
    reader's creation."""
    dropped = drop_caches() if cold else False
    meta = MetadataTable(index.table)
    start, cpu = time.perf_counter(), time.process_time()
    reader = meta.reader()
    found = index_lookup.lookup(reader, keys)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return Lookup(found, wall, cpu, modes_text(reader.last_modes), dropped)


def run_lookups(index: Index, rng: np.random.Generator, *, small: bool) -> None:
    n, tag = index.n, f"[{index.n:,} keys]"
    positions = rng.choice(n, size=min(EXISTING, n), replace=False)
    absent = uuid4_strings(ABSENT, rng)
    absent = absent.filter(pc.invert(pc.is_in(absent, value_set=index.keys)))
    asked = pa.concat_arrays([index.keys.take(pa.array(positions)), absent])
    asked = asked.take(pa.array(rng.permutation(len(asked))))  # interleave present / absent
    expected = expected_rows(index, np.sort(positions))
    label = f"{len(positions) // 1000}k+{len(absent) // 1000}k"
    index.probe = (asked, expected, absent)

    cold = lookup_once(index, asked, cold=True)
    status = check_lookup(cold.found, expected, absent)
    os_state = "OS cache dropped" if cold.dropped else "OS cache warm"
    print(
        f"{tag} lookup {label} COLD: {cold.wall:.3f} s (cpu {cold.cpu:.2f} s, {os_state}); "
        f"{status}; {cold.modes}"
    )
    warm_runs = [lookup_once(index, asked, cold=False) for _ in range(3)]
    warm = min(warm_runs, key=lambda r: r.wall)
    warm_status = check_lookup(warm_runs[-1].found, expected, absent)
    print(
        f"{tag} lookup {label} WARM: {warm.wall:.3f} s (cpu {warm.cpu:.2f} s, best of 3); "
        f"{warm_status}; {warm.modes}"
    )
    index.figures.update(
        {
            f"lookup {label} cold s (cpu)": f"{cold.wall:.3f} ({cold.cpu:.2f})"
            + ("" if cold.dropped else " OS warm"),
            f"lookup {label} warm s (cpu)": f"{warm.wall:.3f} ({warm.cpu:.2f})",
            f"lookup {label} check": "OK" if status == warm_status == "OK" else "FAIL",
            f"lookup {label} modes": cold.modes,
        }
    )
    index.numbers.update({"cold": cold.wall, "warm": warm.wall})
    index.checks.update({"cold": status, "warm": warm_status, "os": os_state, "label": label})

    reader = MetadataTable(index.table).reader()
    asked_list = asked.to_pylist()
    locations, loc_s = timed(lambda: index_lookup.locations(reader, asked_list))
    hits = sum(1 for v in locations.values() if v is not None)
    loc_ok = "OK" if hits == len(positions) and len(locations) == len(asked_list) else "FAIL"
    print(f"{tag} locations() {label} WARM: {loc_s:.3f} s; {hits:,} found; {loc_ok}")
    index.figures[f"locations() {label} warm s"] = f"{loc_s:.3f} {loc_ok}"

    if not small:
        return
    for size in (100, 1_000):
        few = np.sort(positions[:size])
        want = index.keys.take(pa.array(few))
        exp = expected_rows(index, few)
        cold = lookup_once(index, want, cold=True)
        status = check_lookup(cold.found, exp, absent)
        warm = min((lookup_once(index, want, cold=False) for _ in range(5)), key=lambda r: r.wall)
        print(
            f"{tag} lookup {size:,} keys: COLD {cold.wall:.3f} s, WARM {warm.wall:.4f} s "
            f"(best of 5); {status}; {cold.modes}"
        )
        index.numbers[f"cold {size}"] = cold.wall
        index.checks[f"cold {size}"] = status
        index.figures.update(
            {
                f"lookup {size} cold s": f"{cold.wall:.3f}",
                f"lookup {size} warm s": f"{warm.wall:.4f}",
                f"lookup {size} modes": f"{cold.modes} {status}",
            }
        )


# ---- main ----------------------------------------------------------------------------------
def bench(n: int, args: argparse.Namespace, rng: np.random.Generator, *, small: bool) -> Index:
    options: dict[str, object] = {}
    if args.row_group_rows:
        options["metadata.base.row.group.rows"] = args.row_group_rows
    if args.keep:  # built once, reused by later runs of the same size and options
        folder = os.path.join(args.keep, f"{n}-{args.row_group_rows}-{args.seed}")
        os.makedirs(folder, exist_ok=True)
        index = build_index(n, folder, rng, options)
        run_lookups(index, rng, small=small)
        return index  # no reshard: it would change the kept index
    with tempfile.TemporaryDirectory(prefix="lakebraid-ri-", dir=args.dir) as folder:
        index = build_index(n, folder, rng, options)
        run_lookups(index, rng, small=small)
        if small:
            run_reshard(index)
        return index


def run_reshard(index: Index) -> None:
    """``WriteClient.reindex``'s work on the built index: 4x the file groups, then the cold
    lookup of the same keys again."""
    assert index.probe is not None
    asked, expected, absent = index.probe
    meta = MetadataTable(index.table)
    before = meta.read_point().group_counts["record_index"]
    after = before * 4
    _, seconds = timed(lambda: reshard(meta, after))
    cold = lookup_once(index, asked, cold=True)
    status = check_lookup(cold.found, expected, absent)
    print(
        f"[{index.n:,} keys] reindex {before} -> {after} file groups in {seconds:.2f} s; "
        f"lookup {index.checks['label']} COLD after it: {cold.wall:.3f} s; {status}"
    )
    index.numbers.update({"reshard": seconds, "cold after": cold.wall})
    index.checks.update({"reshard": f"{before} -> {after}", "cold after": status})
    index.figures.update(
        {
            f"reindex {before} -> {after} groups s": f"{seconds:.2f}",
            "lookup cold after reindex s": f"{cold.wall:.3f} {status}",
        }
    )


def print_table(runs: list[Index]) -> None:
    names = list(dict.fromkeys(k for r in runs for k in r.figures))
    width = max(len(k) for k in names)
    cols = [f"{r.n:,} keys" for r in runs]
    colw = [
        max(len(c), *(len(r.figures.get(k, "")) for k in names))
        for c, r in zip(cols, runs, strict=True)
    ]
    print()
    print(
        f"{'figure':<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cols, colw, strict=True))
    )
    for name in names:
        values = [r.figures.get(name, "-") for r in runs]
        print(
            f"{name:<{width}}  " + "  ".join(f"{v:>{w}}" for v, w in zip(values, colw, strict=True))
        )


def report(index: Index) -> Report:
    """The main index's figures as rows beside the peers (which keep no key index: n/a)."""
    n, nums, checks = index.n, index.numbers, index.checks
    result = Report(
        "record_index",
        f"{n:,} random UUID4 keys over {len(PARTITIONS)} partitions x {FILE_IDS} file ids",
        notes=[
            "record_index: delta-rs and pyiceberg keep no record-level index, so n/a; bytes "
            "per entry = record-index base files on disk / keys (Hudi RFC-8 reports "
            f"{RFC8_BYTES})",
            f"record_index: cold = metadata footer and log caches cleared ({checks['os']}); "
            "warm = best of 3; each from a new reader",
        ],
    )
    result.add(
        f"record index bytes per entry ({n:,} keys)", "B/entry", {"lakebraid": nums["bytes"]}
    )
    result.add(f"build record index ({n:,} keys)", "s", {"lakebraid": nums["build"]})
    label = checks["label"]
    result.add(f"lookup {label} keys, cold", "s", {"lakebraid": nums["cold"]}, checks["cold"])
    result.add(f"lookup {label} keys, warm", "s", {"lakebraid": nums["warm"]}, checks["warm"])
    if "reshard" in nums:
        name = f"reindex {n:,} entries, {checks['reshard']} groups"
        result.add(name, "s", {"lakebraid": nums["reshard"]})
        result.add(
            f"lookup {label} keys, cold, after the reindex",
            "s",
            {"lakebraid": nums["cold after"]},
            checks["cold after"],
        )
    for size in (100, 1_000):
        if f"cold {size}" in nums:
            result.add(
                f"lookup {size:,} keys, cold",
                "s",
                {"lakebraid": nums[f"cold {size}"]},
                checks[f"cold {size}"],
            )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--keys", type=int, default=10_000_000, help="main index size")
    parser.add_argument("--quick", action="store_true", help="main index of 1,000,000 keys")
    parser.add_argument(
        "--scale-keys", type=int, default=1_000_000, help="second, smaller index (0: none)"
    )
    parser.add_argument(
        "--row-group-rows", type=int, default=0, help="metadata.base.row.group.rows (0: default)"
    )
    parser.add_argument("--dir", default=None, help="parent folder of the temporary tables")
    parser.add_argument(
        "--keep",
        default=None,
        help="folder that keeps the built indexes: later runs of the same size, row group "
        "size and seed reuse them (no reindex timing, no reshard)",
    )
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    main_n = 1_000_000 if args.quick else args.keys
    if main_n <= EXISTING:
        parser.error(f"the index needs more than {EXISTING:,} keys")
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(
        f"record index benchmark: {main_n:,} keys (pyarrow {pa.__version__}, numpy "
        f"{np.__version__}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})"
    )
    runs = [bench(main_n, args, rng, small=True)]
    if args.scale_keys > EXISTING and args.scale_keys != main_n:
        runs.append(bench(args.scale_keys, args, rng, small=False))
    print_table(runs)
    figures = runs[0].figures
    cold = figures.get(f"lookup {EXISTING // 1000}k+{ABSENT // 1000}k cold s (cpu)", "?")
    print(
        f"goals: <= {GOAL_BYTES:g} bytes/entry (RFC-8 reports {RFC8_BYTES}): "
        f"{figures['bytes per entry']}; cold 100k+10k lookup < {GOAL_COLD_S:g} s: {cold}"
    )
    print(
        f"total wall time {time.perf_counter() - started:.1f} s "
        f"(load average now {os.getloadavg()[0]:.1f})"
    )
    report(runs[0]).save(args.json)
    checks = runs[0].checks
    return 0 if all(checks[k] == "OK" for k in checks if k.startswith("cold") or k == "warm") else 1


if __name__ == "__main__":
    raise SystemExit(main())
