"""One file slice of the data table read as rows: a :class:`ReadUnit` names its base file and,
in a merge-on-read table, its log files, oldest first; :func:`read_unit` reads the base, then
every block of the logs (``index.datalog``), and merges them
(``writers.write.logmerge``: deletes remove, the highest precombine value wins, ties to the
newest). Plain data and a plain function: reads (``writers.read``), validation and Spark's
Python workers use them alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.index.datalog import DataLogBlock, iter_blocks
from lakebraid.index.errors import DamagedListingError
from lakebraid.index.file_groups import DataSlice
from lakebraid.index.keys import RECORD_KEY
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.write.datafile import (
    conform,
    data_schema,
    dictionaries_kept,
    read_parquet,
    stored_keys,
    virtual_key,
)
from lakebraid.writers.write.logmerge import merge_slice


class ReadUnit(msgspec.Struct, frozen=True):
    """One file slice to read: paths (or URLs) of its base (None: logs only) and its logs,
    oldest first. ``keys``: a read of these record keys only (a key-equality filter): the
    log blocks whose footers rule them all out are skipped, and only their rows returned."""

    base: str | None
    logs: tuple[str, ...] = ()
    keys: tuple[str, ...] | None = None
    base_size: int | None = None  # the base's size in the listing: a file of another is refused

    def paths(self) -> list[str]:
        return ([self.base] if self.base is not None else []) + list(self.logs)

    @classmethod
    def of(cls, layout: TableLayout, piece: DataSlice, base_size: int | None = None) -> ReadUnit:
        """The unit of file slice ``piece`` of the table at ``layout``."""
        base = layout.data_file(piece.partition, piece.base) if piece.base is not None else None
        logs = tuple(layout.data_file(piece.partition, n) for n in piece.logs)
        return cls(base, logs, base_size=base_size)


def read_unit(
    fs: AbstractFileSystem,
    unit: ReadUnit,
    schema: pa.Schema,
    derive_key: str | None,
    ordering: str | None,
    *,
    threads: bool = True,
    keep_dictionaries: bool = False,
) -> pa.Table:
    """The rows of one unit in ``schema`` (the table's read schema, ``_braid_record_key``
    included; ``derive_key``: the key column of a virtual one). ``ordering``: the precombine
    column when stored rows are ordered by event time, else None (the newest wins).
    ``keep_dictionaries``: the text columns the base stores as Arrow dictionaries stay so (a
    compaction writes them as such: ``datafile.dictionaries_kept``)."""
    wanted = None if unit.keys is None else pa.array(unit.keys, pa.string())
    base = None
    if unit.base is not None:
        base = read_parquet(fs, unit.base, threads=threads, size=unit.base_size)
    if base is not None and keep_dictionaries:
        schema = dictionaries_kept(schema, base.schema)
    if base is not None and wanted is not None:
        base = base.filter(pc.is_in(stored_keys(base, derive_key), value_set=wanted))
    if not unit.logs:
        return conform(base if base is not None else schema.empty_table(), schema, derive_key)
    blocks = [block for path in unit.logs for block in iter_blocks(fs, path, wanted)]
    if wanted is None:
        check_complete(unit, blocks)
    merged = merge_slice(base, blocks, schema, ordering, derive_key, owned=True)  # in ``schema``
    if wanted is None:
        return merged
    return merged.filter(pc.is_in(merged.column(RECORD_KEY), value_set=wanted))


def check_complete(unit: ReadUnit, blocks: Sequence[DataLogBlock]) -> None:
    """Raise :class:`index.errors.DamagedListingError` unless ``blocks`` (every block of the
    unit's logs) are as many as the newest block's footer counts for its slice
    (``SliceKeys.blocks``: each append extends its predecessor's count). Fewer: a log of an
    earlier commit on the slice is missing from the listing (the completion file of the
    commit that wrote it, or its metadata log, was lost) or from storage, and the merge
    would silently return that log's rows as they were before it."""
    counted = blocks[-1].footer.slice.blocks if blocks else 0
    if counted != len(blocks):
        raise DamagedListingError(
            f"the file slice of log {unit.logs[-1]} holds {len(blocks)} log blocks, but its "
            f"newest block's footer counts {counted}: a log an earlier commit appended to this "
            "slice is missing (its completion file under .braid/global, its metadata log, or "
            "the log file itself was lost). Nothing was read or written; restore the missing "
            "file from a backup (`validate()` names the commit), or restore the table to a "
            "savepoint"
        )


def slice_rows(
    fs: AbstractFileSystem,
    layout: TableLayout,
    slices: Mapping[str, Mapping[str, DataSlice]],
    spec: list[tuple[str, str, bool]],
    record_key: str,
    order: str | None,
    partition: str,
    file_id: str,
    columns: list[str],
) -> pa.Table | None:
    """``columns`` of a merge-on-read group's current rows, its slice merged as reads merge it
    (``order``: the precombine column of event-time ordering; None: unlisted);
    ``route.stale_moves`` compares against them."""
    piece = slices.get(partition, {}).get(file_id)
    if piece is None:
        return None
    rows = read_unit(
        fs, ReadUnit.of(layout, piece), data_schema(spec), virtual_key(spec, record_key), order
    )
    return rows.select([c for c in columns if c in rows.column_names])
