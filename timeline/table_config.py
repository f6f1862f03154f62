"""``.braid/table.json``: the table config (this module alone owns its format).

Format version 1, msgspec JSON of :class:`TableConfig`::

    {"format_version": 1, "name": "trips", "record_key": "id", "partition_fields": ["day"],
     "precombine_field": "ts", "schema": [{"name": "id", "type": "string", "nullable": false},
     ...], "index": {"record_index_file_groups": 4,
     "files_file_groups": 1, "column_stats_file_groups": 2}, "options": {...},
     "created_at": "20261122153000123"}

``schema[].type`` is a pyarrow type written by :func:`type_to_text` (``string``, ``int64``,
``double``, ``bool``, ``date32[day]``, ``timestamp[us, tz=UTC]``, ``decimal128(10, 2)``,
``list<item: int64>`` ...) and read back by :func:`text_to_type`. A reader that finds a
``format_version`` it does not know refuses the table with a clear error.

Version 2 adds ``index.record_index_scope``: ``"global"`` (a record key is unique in the
table) or ``"partition"`` (unique within its partition: ``lakebraid.index.scope``). A table
with a partition-scoped record index is written as version 2, so a reader that knows only
version 1 refuses it rather than treat its keys as global; other tables stay version 1.

Version 3 adds ``table_type``: ``"copy_on_write"`` (every write rewrites the file groups it
touches) or ``"merge_on_read"`` (writes append log blocks that reads merge and a compaction
folds, docs/format.md section 8.1). A merge-on-read table is written as version 3, so a reader
that knows only versions 1 and 2 refuses it rather than read its base files without their
logs; copy-on-write tables keep the lowest version that holds them.
"""

from __future__ import annotations

import re

import msgspec
import pyarrow as pa

from lakebraid.timeline.errors import ConfigError
from lakebraid.timeline.layout import check_field_name

FORMAT_VERSION = 3  # the newest version this code reads
READ_VERSIONS = (1, 2, 3)
SCOPES = ("global", "partition")  # record-index scopes (lakebraid.index.scope)
COPY_ON_WRITE, MERGE_ON_READ = "copy_on_write", "merge_on_read"
TABLE_TYPES = (COPY_ON_WRITE, MERGE_ON_READ)

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    str(t): t
    for t in (
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint8(),
        pa.uint16(),
        pa.uint32(),
        pa.uint64(),
        pa.float16(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.date32(),
        pa.date64(),
        pa.null(),
    )
}
_TS_RE = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=(.+))?\]$")
_DEC_RE = re.compile(r"^decimal(128|256)\((\d+), (-?\d+)\)$")


class FieldSpec(msgspec.Struct, frozen=True):
    name: str
    type: str
    nullable: bool = True


class IndexSettings(msgspec.Struct, frozen=True):
    record_index_file_groups: int = 1
    files_file_groups: int = 1
    column_stats_file_groups: int = 1
    record_index_scope: str = "global"


class TableConfig(msgspec.Struct, frozen=True, kw_only=True):
    format_version: int = 1  # 2: a partition-scoped record index; 3: merge-on-read (module doc)
    name: str
    record_key: str
    partition_fields: list[str] = []
    precombine_field: str | None = None
    schema: list[FieldSpec] = []
    index: IndexSettings = IndexSettings()
    options: dict[str, str] = {}
    created_at: str | None = None
    table_type: str = COPY_ON_WRITE

    @property
    def merge_on_read(self) -> bool:
        return self.table_type == MERGE_ON_READ

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(f.name, text_to_type(f.type), f.nullable) for f in self.schema])

    def validate(self) -> TableConfig:
        """Refuse a config no write could use (names the field and what to do)."""
        self._check_names()
        names = [f.name for f in self.schema]
        if len(set(names)) != len(names):
            raise ConfigError(f"table {self.name!r}: duplicate column names in schema {names}")
        for label, column in [
            ("record key", self.record_key),
            ("precombine", self.precombine_field),
        ]:
            if column is not None and names and column not in names:
                raise ConfigError(f"table {self.name!r}: {label} column {column!r} not in {names}")
        for field in self.partition_fields:
            check_field_name(field)
            if names and field not in names:
                raise ConfigError(f"table {self.name!r}: partition field {field!r} not in {names}")
        if self.record_key in self.partition_fields:
            raise ConfigError(f"table {self.name!r}: the record key cannot be a partition field")
        self._check_scope()
        self._check_type()
        for field in self.schema:
            text_to_type(field.type)
        return self

    def _check_scope(self) -> None:
        scope = self.index.record_index_scope
        if scope not in SCOPES:
            raise ConfigError(
                f"table {self.name!r}: index_scope must be one of {list(SCOPES)}, got {scope!r}"
            )
        if scope == "partition" and not self.partition_fields:
            raise ConfigError(
                f"table {self.name!r}: a partition-scoped record index needs partition fields "
                "(partition_by=[...]); an unpartitioned table's keys are unique in the table "
                "(index_scope='global')"
            )
        if self.format_version < 2 and scope != "global":
            raise ConfigError(
                f"table {self.name!r}: table format version {self.format_version} has a global "
                "record index only (a partition-scoped one needs format_version 2)"
            )

    def _check_type(self) -> None:
        if self.table_type not in TABLE_TYPES:
            raise ConfigError(
                f"table {self.name!r}: table_type must be one of {list(TABLE_TYPES)}, got "
                f"{self.table_type!r}"
            )
        if self.format_version < 3 and self.table_type != COPY_ON_WRITE:
            raise ConfigError(
                f"table {self.name!r}: table format version {self.format_version} holds "
                "copy-on-write tables only (merge_on_read needs format_version 3)"
            )

    def _check_names(self) -> None:
        if not isinstance(self.record_key, str) or not self.record_key.strip():
            raise ConfigError(
                f"table {self.name!r}: record_key must name a column, got {self.record_key!r}"
            )
        if self.precombine_field is not None and (
            not isinstance(self.precombine_field, str) or not self.precombine_field.strip()
        ):
            raise ConfigError(
                f"table {self.name!r}: precombine must name a column or be None, got "
                f"{self.precombine_field!r}"
            )
        if self.precombine_field == self.record_key:
            raise ConfigError(
                f"table {self.name!r}: the precombine field cannot be the record key "
                f"{self.record_key!r}"
            )
        fields = self.partition_fields
        if len(set(fields)) != len(fields):
            raise ConfigError(f"table {self.name!r}: partition fields repeat: {fields}")
        if self.precombine_field in fields:
            raise ConfigError(
                f"table {self.name!r}: the precombine field cannot be a partition field"
            )
        reserved = [c for c in (self.record_key, self.precombine_field, *fields) if _ours(c)]
        if reserved:
            raise ConfigError(
                f"table {self.name!r}: column names starting with _braid_ are lakebraid's own "
                f"({reserved}); name the key, precombine and partition columns otherwise"
            )


def _ours(name: str | None) -> bool:
    return isinstance(name, str) and name.startswith("_braid_")


def canonical_type(data_type: pa.DataType) -> pa.DataType:
    """``data_type`` as the table format holds it: a list's items named ``item`` and nullable
    at every depth (Spark's Arrow lists name them ``element``, not null: the same values)."""
    if pa.types.is_list(data_type):
        return pa.list_(canonical_type(data_type.value_type))
    return data_type


def type_to_text(data_type: pa.DataType) -> str:
    text = str(canonical_type(data_type))
    text_to_type(text)  # refuse now what could not be read back
    return text


def text_to_type(text: str) -> pa.DataType:
    if text in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[text]
    if match := _TS_RE.match(text):
        return pa.timestamp(match[1], tz=match[2])
    if match := _DEC_RE.match(text):
        make = pa.decimal128 if match[1] == "128" else pa.decimal256
        return make(int(match[2]), int(match[3]))
    if text.startswith("list<item: ") and text.endswith(">"):
        return pa.list_(text_to_type(text[len("list<item: ") : -1]))
    raise ConfigError(
        f"column type {text!r} is not supported by table format {FORMAT_VERSION}; "
        "cast the column to a primitive, decimal, timestamp or list type"
    )


def schema_to_fields(schema: pa.Schema) -> list[FieldSpec]:
    return [FieldSpec(f.name, type_to_text(f.type), f.nullable) for f in schema]


def encode(config: TableConfig) -> bytes:
    return msgspec.json.format(msgspec.json.encode(config), indent=2) + b"\n"


def version_for(table_type: str, scope: str) -> int:
    """The lowest format version that holds a table of this type and record-index scope."""
    if table_type == MERGE_ON_READ:
        return 3
    return 1 if scope == "global" else 2


def decode(data: bytes, *, path: str) -> TableConfig:
    try:
        probe = msgspec.json.decode(data, type=dict)
    except msgspec.DecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); the table config is damaged", table=path
        ) from None
    version = probe.get("format_version")
    if version not in READ_VERSIONS:
        raise ConfigError(
            f"{path} has table format version {version!r}; this lakebraid reads versions "
            f"{list(READ_VERSIONS)}: upgrade lakebraid or migrate the table",
            table=path,
        )
    try:
        return msgspec.json.decode(data, type=TableConfig).validate()
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: invalid table config: {exc}", table=path) from None
