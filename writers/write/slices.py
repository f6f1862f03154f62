"""One file slice of the data table read as rows: a :class:`ReadUnit` names its base file and,
in a merge-on-read table, its log files, oldest first; :func:`read_unit` reads the base, then
every block of the logs (``writers.write.datalog``), and merges them
(``writers.write.logmerge``: deletes remove, the highest precombine value wins, ties to the
newest). Plain data and a plain function: reads (``writers.read``), validation and Spark's
Python workers use them alike.
"""

from __future__ import annotations

import msgspec
import pyarrow as pa
from fsspec import AbstractFileSystem

from lakebraid.writers.write.datafile import conform, read_parquet
from lakebraid.writers.write.datalog import iter_blocks
from lakebraid.writers.write.logmerge import merge_slice


class ReadUnit(msgspec.Struct, frozen=True):
    """One file slice to read: paths (or URLs) of its base (None: logs only) and its logs,
    oldest first."""

    base: str | None
    logs: tuple[str, ...] = ()

    def paths(self) -> list[str]:
        return ([self.base] if self.base is not None else []) + list(self.logs)


def read_unit(
    fs: AbstractFileSystem,
    unit: ReadUnit,
    schema: pa.Schema,
    derive_key: str | None,
    ordering: str | None,
    *,
    threads: bool = True,
) -> pa.Table:
    """The rows of one unit in ``schema`` (the table's read schema, ``_braid_record_key``
    included; ``derive_key``: the key column of a virtual one). ``ordering``: the precombine
    column when stored rows are ordered by event time, else None (the newest wins)."""
    if unit.base is not None:
        base = conform(read_parquet(fs, unit.base, threads=threads), schema, derive_key)
    else:
        base = schema.empty_table()
    if not unit.logs:
        return base
    blocks = [block for path in unit.logs for block in iter_blocks(fs, path)]
    return conform(merge_slice(base, blocks, schema, ordering), schema)
