"""Records of the metadata table: one frozen msgspec Struct per metadata partition.

Each record has a string ``key`` (the sort and shard key of its partition; a field or a
property) and its partition's merge rule ``merge(older, newer)``, which applies ``newer`` on top
of ``older`` and returns the result, or ``None`` when the key disappears. :func:`merge_records`
dispatches on the partition.

Wire format, record schema version 1 (:data:`SCHEMA_VERSION`). A log block body (see
``metadata.logblock``) is, before compression, one msgpack array of records in ascending key
order; every record is a msgpack array of its fields in declaration order (``array_like``
Structs):

=================  ==========================================================================
partition          record array
=================  ==========================================================================
``files``          ``[key: str, added: map str -> int, deleted: array of str]``
``column_stats``   ``[column, partition, file: str, min_value, max_value, null_count: int,
                   value_count: int, total_size: int, deleted: bool]``
``record_index``   ``[key: str, partition: str, file_id_hi: int64, file_id_lo: int64,
                   instant: int64, deleted: bool]``
``secondary_index`` ``[key: str, deleted: bool]``
=================  ==========================================================================

**files.** ``key`` is the partition path (``""`` for an unpartitioned table). ``added`` maps
file name -> size in bytes, ``deleted`` lists file names. The record under the reserved key
:data:`ALL_PARTITIONS_KEY` is a ``FilesRecord`` too: ``added`` maps each partition path added
to ``0`` and ``deleted`` lists partition paths removed. Merge is cumulative: ``merged.added`` =
(``older.added`` minus ``newer.deleted``) updated with ``newer.added`` (a name both deleted and
re-added in ``newer`` stays added, with the new size); ``merged.deleted`` = (``older.deleted`` |
``newer.deleted``) minus ``merged.added``, sorted. Deletes are *kept* so that merging is
associative: two log blocks folded together and then applied to a base give the same result as
applying them one by one. :meth:`FilesRecord.full_state` drops the deletes when a record holds
the complete history (compaction with no older base). A files record never disappears.

**column_stats.** ``key`` is ``column + "\\x00" + partition + "\\x00" + file``; no component may
contain ``"\\x00"``, so the key is unambiguous and sorts exactly as the tuple (column, partition,
file). ``min_value`` / ``max_value`` are ``None``, ``bool``, ``int``, ``float``, ``str``,
``bytes``, dates, datetimes or decimals, in the wire form of ``metadata.stat_values``.

Merge: newest wins; ``deleted=True`` marks a tombstone, and merging a tombstone gives ``None``.

**record_index.** ``key`` is the record key. The file id, a canonical UUID string, is stored as
two signed int64 (:func:`file_id_to_ints` / :func:`ints_to_file_id`), the instant time
(17-digit ``yyyyMMddHHmmssSSS``) as an int64 (:func:`instant_to_int` / :func:`int_to_instant`).
Merge: newest wins, tombstones (``deleted=True``) give ``None``.

**secondary_index.** ``key`` is ``column + "\\x00" + value + "\\x00" + record key`` (the value's
and the record key's canonical text, ``index.keys``; none may contain ``"\\x00"``), so one
column's entries of one value are a contiguous key range. Merge: newest wins, tombstones give
``None``.

``merge`` is a left fold from the base (``older`` already holds everything before ``newer``).
To fold log blocks among themselves before applying them to a base, pass
``keep_tombstones=True`` so a tombstone survives as a record and still deletes the base's value.
"""

from __future__ import annotations

import enum
import itertools
import uuid
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

import msgspec

from lakebraid.metadata.errors import MetadataFormatError, MetadataTypeError, MetadataValueError
from lakebraid.metadata.stat_values import PLAIN, stat_from_wire, stat_to_wire

SCHEMA_VERSION = 1
ALL_PARTITIONS_KEY = "__all_partitions__"

Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class Partition(enum.StrEnum):
    FILES = "files"
    COLUMN_STATS = "column_stats"
    RECORD_INDEX = "record_index"
    SECONDARY_INDEX = "secondary_index"


class FilesRecord(msgspec.Struct, frozen=True, array_like=True):
    """Files of one data partition (or, under :data:`ALL_PARTITIONS_KEY`, the partitions)."""

    key: str
    added: dict[str, NonNegative]
    deleted: list[str]

    @staticmethod
    def merge(
        older: FilesRecord | None, newer: FilesRecord, *, keep_tombstones: bool = False
    ) -> FilesRecord:
        del keep_tombstones  # files records have no tombstones: deletes are always kept
        if older is None:
            if not newer.deleted and _ascending(newer.added):
                return newer  # already in the merged form: nothing to apply it to
            older = FilesRecord(newer.key, {}, [])
        _same_key(older.key, newer.key)
        gone = set(newer.deleted)
        added = {name: size for name, size in older.added.items() if name not in gone}
        added.update(newer.added)
        deleted = (set(older.deleted) | gone) - added.keys()
        return FilesRecord(newer.key, dict(sorted(added.items())), sorted(deleted))

    def full_state(self) -> FilesRecord:
        """This record with its deletes dropped (for a record that holds the whole history)."""
        return FilesRecord(self.key, dict(sorted(self.added.items())), [])


R = TypeVar("R", bound="ColumnStatsRecord | RecordIndexRecord")


def _newest_wins(older: R | None, newer: R, *, keep_tombstones: bool = False) -> R | None:
    """The merge rule of ``column_stats`` and ``record_index`` records: newest wins, a
    tombstone gives ``None`` (``keep_tombstones``: the tombstone itself)."""
    if older is not None:
        _same_key(older.key, newer.key)
    return None if newer.deleted and not keep_tombstones else newer


class ColumnStatsRecord(msgspec.Struct, frozen=True, array_like=True):
    """Statistics of one column in one data file."""

    column: str
    partition: str
    file: str
    min_value: Any
    max_value: Any
    null_count: NonNegative
    value_count: NonNegative
    total_size: NonNegative
    deleted: bool = False

    @property
    def key(self) -> str:
        return column_stats_key(self.column, self.partition, self.file)

    @classmethod
    def tombstone(cls, column: str, partition: str, file: str) -> ColumnStatsRecord:
        return cls(column, partition, file, None, None, 0, 0, 0, deleted=True)

    merge = staticmethod(_newest_wins)


class RecordLocation(msgspec.Struct, frozen=True):
    """Where a record key lives: data partition path, file id (UUID) and instant time."""

    partition: str
    file_id: str
    instant: str


class RecordIndexRecord(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Record key -> location, compactly (file id as two int64, instant as int64).

    Only scalar fields, so instances cannot take part in reference cycles: ``gc=False`` spares
    the garbage collector millions of them."""

    key: str
    partition: str
    file_id_hi: Int64
    file_id_lo: Int64
    instant: Int64
    deleted: bool = False

    @classmethod
    def of(cls, key: str, location: RecordLocation) -> RecordIndexRecord:
        hi, lo = file_id_to_ints(location.file_id)
        return cls(key, location.partition, hi, lo, instant_to_int(location.instant))

    @classmethod
    def tombstone(cls, key: str, instant: str) -> RecordIndexRecord:
        return cls(key, "", 0, 0, instant_to_int(instant), deleted=True)

    @property
    def file_id(self) -> str:
        return ints_to_file_id(self.file_id_hi, self.file_id_lo)

    @property
    def location(self) -> RecordLocation:
        return RecordLocation(self.partition, self.file_id, int_to_instant(self.instant))

    merge = staticmethod(_newest_wins)


class SecondaryIndexRecord(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One (column, value, record key) entry of a secondary index, all in ``key``."""

    key: str
    deleted: bool = False

    merge = staticmethod(_newest_wins)


MetadataRecord = FilesRecord | ColumnStatsRecord | RecordIndexRecord | SecondaryIndexRecord

RECORD_TYPES: dict[Partition, type[MetadataRecord]] = {
    Partition.FILES: FilesRecord,
    Partition.COLUMN_STATS: ColumnStatsRecord,
    Partition.RECORD_INDEX: RecordIndexRecord,
    Partition.SECONDARY_INDEX: SecondaryIndexRecord,
}


def merge_records(
    partition: Partition | str,
    older: MetadataRecord | None,
    newer: MetadataRecord,
    *,
    keep_tombstones: bool = False,
) -> MetadataRecord | None:
    """Apply ``newer`` on top of ``older`` (``None``: nothing yet) by the partition's rule."""
    kind = RECORD_TYPES[partition if isinstance(partition, Partition) else Partition(partition)]
    if not isinstance(newer, kind) or (older is not None and not isinstance(older, kind)):
        raise MetadataTypeError(f"merge_records({partition}): records must be {kind.__name__}")
    return kind.merge(older, newer, keep_tombstones=keep_tombstones)  # type: ignore[arg-type]


def column_stats_key(column: str, partition: str, file: str) -> str:
    if "\x00" in column or "\x00" in partition or "\x00" in file:
        raise MetadataValueError("column, partition and file names may not contain NUL")
    return f"{column_stats_prefix(column)}{partition}\x00{file}"


def column_stats_prefix(column: str) -> str:  # what every key of a column starts with
    return f"{column}\x00"


def _ascending(names: dict[str, int]) -> bool:
    return len(names) < 2 or all(a < b for a, b in itertools.pairwise(names))


def _same_key(older: str, newer: str) -> None:
    if older != newer:
        raise MetadataValueError(f"cannot merge records of different keys {older!r} and {newer!r}")


# -- compact encodings ----------------------------------------------------------------------

_U64 = 1 << 64


def file_id_to_ints(file_id: str) -> tuple[int, int]:
    """A canonical UUID string (lowercase, hyphenated) -> (high, low) signed int64."""
    try:
        value = uuid.UUID(file_id)
    except ValueError:
        raise MetadataValueError(f"file id {file_id!r} is not a UUID") from None
    if str(value) != file_id:
        raise MetadataValueError(
            f"file id {file_id!r} is not a canonical (lowercase, hyphenated) UUID"
        )
    hi, lo = value.int >> 64, value.int & (_U64 - 1)
    return (hi - _U64 if hi >= 1 << 63 else hi), (lo - _U64 if lo >= 1 << 63 else lo)


def ints_to_file_id(hi: int, lo: int) -> str:
    """Inverse of :func:`file_id_to_ints`."""
    for part in (hi, lo):
        if not -(1 << 63) <= part < 1 << 63:
            raise MetadataValueError(f"{part} is not a signed int64")
    return str(uuid.UUID(int=((hi % _U64) << 64) | (lo % _U64)))


def instant_to_int(instant: str) -> int:
    """A 17-digit ``yyyyMMddHHmmssSSS`` instant time -> int64 (order preserving)."""
    if len(instant) != 17 or not instant.isascii() or not instant.isdigit():
        raise MetadataValueError(f"instant time {instant!r} is not 17 digits")
    return int(instant)


def int_to_instant(value: int) -> str:
    """Inverse of :func:`instant_to_int`."""
    if not 0 <= value < 10**17:
        raise MetadataValueError(f"{value} is not a 17-digit instant time")
    return f"{value:017d}"


# -- record codec (the body of a log block, before compression) ----------------------------

_ENCODER = msgspec.msgpack.Encoder()
_DECODERS = {
    partition: msgspec.msgpack.Decoder(list[kind], ext_hook=stat_from_wire)
    for partition, kind in RECORD_TYPES.items()
}


def encode_records(partition: Partition | str, records: Sequence[MetadataRecord]) -> bytes:
    """Encode records of ``partition`` (the uncompressed body of a data block).

    Checks every record is of the partition's type; values the format cannot represent raise
    ``TypeError`` / ``ValueError`` / ``OverflowError`` here rather than on a later read."""
    partition = Partition(partition)
    kind = RECORD_TYPES[partition]
    foreign = set(map(type, records)) - {kind}
    if foreign:
        names = ", ".join(sorted(t.__name__ for t in foreign))
        raise MetadataTypeError(f"{partition} blocks hold {kind.__name__}, not {names}")
    if partition is Partition.COLUMN_STATS:
        records = [_stats_to_wire(r) for r in records]  # type: ignore[arg-type]
    body = _ENCODER.encode(records)
    try:  # typed decoding is the one validator of field types and ranges
        _DECODERS[partition].decode(body)
    except msgspec.ValidationError as exc:
        raise MetadataValueError(f"{partition} records do not fit the format: {exc}") from None
    return body


def decode_records(
    partition: Partition | str, body: bytes | memoryview, schema_version: int = SCHEMA_VERSION
) -> list[MetadataRecord]:
    """Inverse of :func:`encode_records`. Raises ``MetadataFormatError`` on an unknown schema
    version and ``msgspec.DecodeError`` / ``ValueError`` on a malformed body."""
    check_schema_version(schema_version)
    return _DECODERS[Partition(partition)].decode(body)


def check_schema_version(schema_version: int) -> None:
    """Raise ``MetadataFormatError`` unless records of ``schema_version`` can be read."""
    if schema_version != SCHEMA_VERSION:
        raise MetadataFormatError(
            f"metadata record schema version {schema_version} is not supported "
            f"(this lakebraid reads version {SCHEMA_VERSION})"
        )


def _stats_to_wire(record: ColumnStatsRecord) -> ColumnStatsRecord:
    column_stats_key(record.column, record.partition, record.file)
    lo, hi = record.min_value, record.max_value
    if type(lo) in PLAIN and type(hi) in PLAIN:
        return record
    return msgspec.structs.replace(record, min_value=stat_to_wire(lo), max_value=stat_to_wire(hi))
