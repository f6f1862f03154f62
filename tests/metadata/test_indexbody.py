"""The columnar body of record-index data blocks (``metadata.indexbody``): round trip against
a model of plain tuples, and every malformed body refused by name."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.indexbody import (
    INDEX_BLOCK_SCHEMA,
    decode_index_body,
    encode_index_body,
    index_key_range,
    index_records,
)
from lakebraid.metadata.records import RecordIndexRecord

INT64 = st.integers(-(2**63), 2**63 - 1)
ENTRY = st.tuples(
    st.text(max_size=20),
    st.sampled_from(["", "day=1", "é=ü"]) | st.text(max_size=6),
    INT64,
    INT64,
    st.integers(0, 10**17 - 1),
    st.booleans(),
)


def table_of(rows: list[tuple], schema: pa.Schema = INDEX_BLOCK_SCHEMA) -> pa.Table:
    columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[]] * len(schema)
    return pa.table(
        [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def stream(table: pa.Table) -> bytes:
    """An IPC stream written here, not by the module: bodies a foreign writer could make."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(ENTRY, max_size=40, unique_by=lambda row: row[0]), st.integers(1, 5))
def test_round_trip_against_the_model(rows: list[tuple], chunks: int) -> None:
    rows = sorted(rows)
    table = table_of(rows)
    if len(rows) > chunks:  # chunked input encodes the same
        step = len(rows) // chunks
        parts = [table.slice(i, step) for i in range(0, len(rows), step)]
        table = pa.concat_tables(parts)
    decoded = decode_index_body(encode_index_body(table))
    assert [tuple(r.values()) for r in decoded.to_pylist()] == rows
    assert decoded.schema.equals(INDEX_BLOCK_SCHEMA)
    assert index_records(decoded) == [RecordIndexRecord(*row) for row in rows]
    first, last = (rows[0][0], rows[-1][0]) if rows else (None, None)
    assert index_key_range(decoded) == (len(rows), first, last)


def test_a_plain_string_partition_column_is_read_too() -> None:
    rows = [("a", "day=1", 1, 2, 3, False), ("b", "", 0, 0, 4, True)]
    assert decode_index_body(stream(table_of(rows))).to_pylist() == table_of(rows).to_pylist()


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("b", "p", 1, 2, 3, False), ("a", "p", 1, 2, 3, False)], "not strictly ascending"),
        ([("a", "p", 1, 2, 3, False), ("a", "q", 1, 2, 3, False)], "not strictly ascending"),
        ([("a", None, 1, 2, 3, False)], "nulls in column partition"),
        ([("a", "p", 1, None, 3, False)], "nulls in column file_id_lo"),
    ],
)
def test_bodies_breaking_the_rules_are_refused(rows: list[tuple], message: str) -> None:
    with pytest.raises(MetadataValueError, match=message):
        decode_index_body(stream(table_of(rows)))
    with pytest.raises(MetadataValueError, match=message):
        encode_index_body(table_of(rows))


@pytest.mark.parametrize(
    "schema",
    [
        INDEX_BLOCK_SCHEMA.remove(5),  # no deleted column
        INDEX_BLOCK_SCHEMA.append(pa.field("extra", pa.int8())),
        INDEX_BLOCK_SCHEMA.set(4, pa.field("instant", pa.int32())),
        INDEX_BLOCK_SCHEMA.set(1, pa.field("partition", pa.dictionary(pa.int8(), pa.string()))),
    ],
)
def test_bodies_of_another_schema_are_refused(schema: pa.Schema) -> None:
    row = ("a", "p", 1, 2, 3, False, 7)[: len(schema)]
    with pytest.raises(MetadataValueError, match="columnar body of schema"):
        decode_index_body(stream(table_of([row], schema)))


def test_bytes_that_are_no_stream_are_refused() -> None:
    with pytest.raises(pa.ArrowInvalid):
        decode_index_body(b"\x90")


def test_the_columns_are_those_the_format_documents() -> None:
    documented = [
        ("key", pa.string()),
        ("partition", pa.string()),
        ("file_id_hi", pa.int64()),
        ("file_id_lo", pa.int64()),
        ("instant", pa.int64()),
        ("deleted", pa.bool_()),
    ]
    assert [(f.name, f.type) for f in INDEX_BLOCK_SCHEMA] == documented
