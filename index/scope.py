"""The record index's scope: what the key of an index entry is.

* ``global`` (the default): the record key's canonical text (``index.keys``); a key is
  unique in the table, and an upsert of a key with new partition values moves it.
* ``partition``: ``partition path NUL key text`` (``day=2026-11-01\\x00k1``); a key is unique
  within its partition and the same key may live in several partitions, each its own record.
  Upserts, deletes and lookups name a key with its partition values. Partition paths never
  hold NUL (``timeline.layout`` escapes it), so the first NUL splits an index key.

Everything past the boundary (hashing to file groups, base files, logs, reindex, undo
corrections, conflict checks, secondary-index entries) treats an index key as opaque text, so
both scopes share one index format. The scope is fixed at creation
(``TableConfig.index.record_index_scope``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.errors import RecordKeyError
from lakebraid.timeline.errors import InvalidPathError
from lakebraid.timeline.layout import parse_partition_path, partition_path
from lakebraid.timeline.table_config import TableConfig

GLOBAL = "global"
PARTITION = "partition"
SEP = "\x00"


def is_scoped(config: TableConfig) -> bool:
    """Whether the table's record index is partition-scoped."""
    return config.index.record_index_scope == PARTITION


def index_keys(keys: pa.Array | pa.ChunkedArray, partitions: pa.Array | None) -> pa.Array:
    """The index keys of rows: ``keys`` (global scope, ``partitions`` None) or each row's
    ``partition NUL key``. ``partitions`` may be a dictionary array."""
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    if partitions is None:
        return keys
    if isinstance(partitions, pa.ChunkedArray):
        partitions = partitions.combine_chunks()
    if pa.types.is_dictionary(partitions.type):
        partitions = partitions.cast(partitions.type.value_type)
    return pc.binary_join_element_wise(partitions.cast(pa.string()), keys.cast(pa.string()), SEP)


def in_partition(keys: pa.Array | pa.ChunkedArray, partition: str | None) -> pa.Array:
    """The index keys of record keys that all live in one partition: ``keys`` themselves
    (global scope, ``partition`` None) or ``partition NUL key`` each."""
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    if partition is None or len(keys) == 0:
        return keys
    return pc.binary_join_element_wise(pa.scalar(partition), keys.cast(pa.string()), SEP)


def split_keys(keys: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(partition paths, key texts) of partition-scoped index keys."""
    parts = pc.extract_regex(keys, r"(?s)^(?P<p>[^\x00]*)\x00(?P<k>.*)$")
    return pc.struct_field(parts, "p"), pc.struct_field(parts, "k")


def key_of(index_key: str, scoped: bool) -> str:
    """The record key text of one index key."""
    return index_key.split(SEP, 1)[1] if scoped else index_key


def partition_of(config: TableConfig, partition: object, *, table: str, what: str) -> str:
    """The partition path a caller names for ``what`` (``lookup``, ``delete``): a mapping of
    every partition field to its value (``{"day": "2026-11-01"}``) or the partition's path
    (``"day=2026-11-01"``)."""
    fields = config.partition_fields
    if isinstance(partition, str):
        try:
            parse_partition_path(partition, fields)
        except InvalidPathError as exc:
            raise RecordKeyError(f"{what}: partition {partition!r}: {exc}", table=table) from None
        return partition
    if not isinstance(partition, Mapping):
        raise RecordKeyError(
            f"{what}: partition must be a mapping of {fields} to values or a partition path "
            f"such as {_example(fields)!r}, not {type(partition).__name__} {partition!r:.60}",
            table=table,
        )
    if sorted(partition) != sorted(fields):
        raise RecordKeyError(
            f"{what}: partition names fields {sorted(partition)}; the table is partitioned by "
            f"{fields}: give a value for each",
            table=table,
        )
    values = [partition[f] for f in fields]
    texts = [None if v is None else pc.cast(pa.scalar(v), pa.string()).as_py() for v in values]
    return partition_path(fields, texts)


def _example(fields: Sequence[str]) -> str:
    return "/".join(f"{f}=..." for f in fields)


def check_partition_given(config: TableConfig, partition: object, *, table: str, what: str) -> None:
    """Refuse a partition-scoped lookup or delete without a partition, and a partition given
    to a table whose index is global (it would be ignored)."""
    if is_scoped(config) and partition is None:
        rows = f", or pass rows with the partition columns {config.partition_fields}"
        cli = f" (in the CLI: --partition {_example(config.partition_fields)})"
        raise RecordKeyError(
            f"{what}: the table's record index is partition-scoped (a key is unique within its "
            f"partition): name the partition, {what}(keys, partition={{...}})"
            f"{rows if what == 'delete' else cli}",
            table=table,
        )
    if not is_scoped(config) and partition is not None:
        raise RecordKeyError(
            f"{what}: partition= is for tables with a partition-scoped record index; this "
            "table's keys are unique in the table: leave partition out",
            table=table,
        )
