"""What a read opens: one *read unit* per file slice of the data table, its base file and, in a
merge-on-read table, the log files merged over it (``index.file_groups.current_slices``).

A unit without logs is a plain Parquet file, read as such (by Spark's own reader for local
tables); a unit with logs is merged (``writers.write.slices.read_unit``). Pruning by column
statistics keeps a unit when any of its files may match: a log may have changed a row of
the base, so the base's own statistics alone never rule a unit out. Plain data: units and
:func:`read_unit` run in Spark's Python workers too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
from fsspec import AbstractFileSystem

from lakebraid.index.file_groups import DataSlice, checked_files, current_slices
from lakebraid.metadata.reader import MetadataReader
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.write.slices import ReadUnit, read_unit

Pair = tuple[str, str]  # (partition, data file name)
Keep = Callable[[list[Pair], MetadataReader], list[Pair]]


def plan_units(
    layout: TableLayout, reader: MetadataReader, keep: Keep | None = None, logs: bool = True
) -> list[ReadUnit]:
    """The read units of ``reader``'s read point, in partition then file order, minus those
    ``keep`` rules out (a unit stays when ``keep`` keeps any of its files). ``logs=False``: a
    read-optimized read, each slice's base file alone (slices without a base are skipped)."""
    listing = checked_files(reader)
    if not any(n.endswith(".log") for files in listing.values() for n in files):
        return _plain_units(layout, reader, listing, keep)  # copy-on-write: no name parsed
    slices = current_slices(listing)
    if not logs:
        slices = {
            p: {g: DataSlice(p, g, s.base) for g, s in groups.items() if s.base is not None}
            for p, groups in slices.items()
        }
    pairs = [
        (p, n) for p, groups in sorted(slices.items()) for s in groups.values() for n in _names(s)
    ]
    kept = set(keep(pairs, reader)) if keep is not None and pairs else set(pairs)
    units = []
    for partition, groups in sorted(slices.items()):
        for piece in sorted(groups.values(), key=lambda s: s.base or s.logs[0]):
            if not any((partition, n) in kept for n in _names(piece)):
                continue
            size = listing[partition].get(piece.base) if piece.base is not None else None
            units.append(ReadUnit.of(layout, piece, size))
    return units


def _plain_units(
    layout: TableLayout,
    reader: MetadataReader,
    listing: dict[str, dict[str, int]],
    keep: Keep | None,
) -> list[ReadUnit]:
    """The units of a listing without logs: one per base file (a group's only file)."""
    pairs = [(p, name) for p, files in sorted(listing.items()) for name in sorted(files)]
    if keep is not None and pairs:
        pairs = keep(pairs, reader)
    return [ReadUnit(layout.data_file(p, name), base_size=listing[p][name]) for p, name in pairs]


def _names(piece: DataSlice) -> list[str]:
    return ([piece.base] if piece.base is not None else []) + list(piece.logs)


def read_units(
    fs: AbstractFileSystem,
    units: Sequence[ReadUnit],
    schema: pa.Schema,
    derive_key: str | None,
    ordering: str | None,
    threads: int,
) -> pa.Table:
    """Every unit's rows, in order (``threads`` units at once, each read on one thread; the
    units with the most logs, the longest merges, start first so no thread is left with one
    at the end)."""
    if len(units) <= 1 or threads <= 1:
        parts = [read_unit(fs, u, schema, derive_key, ordering) for u in units]
    else:
        order = sorted(range(len(units)), key=lambda i: -len(units[i].logs))
        with ThreadPoolExecutor(min(len(units), threads)) as pool:
            done = pool.map(
                lambda i: read_unit(fs, units[i], schema, derive_key, ordering, threads=False),
                order,
            )
            by_index = dict(zip(order, done, strict=True))
        parts = [by_index[i] for i in range(len(units))]
    return pa.concat_tables(parts) if parts else schema.empty_table()
