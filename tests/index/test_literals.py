"""Literals an index may look up (``index.literals``): only those Spark compares with the column
by their own value. Found by a hostile trial: ``id = 9007199254740993e0`` on a bigint key looked
up the one key 2^53, while Spark's ``CAST(id AS DOUBLE) = 9.007199254740992E15`` also holds for
2^53 + 1, whose file was dropped from the read; a ``TIMESTAMP`` literal against a
``TIMESTAMP_NTZ`` key was looked up at its UTC wall clock."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.index.literals import index_values
from lakebraid.index.secondary import wanted_keys
from lakebraid.index.sql_filter import SqlSettings, parse_conditions
from lakebraid.writers.client import WriteClient
from lakebraid.writers.read.plan import read_arrow_files

UTC = dt.UTC
LOOKED_UP = [
    (pa.int64(), [5, -7], [5, -7]),
    (pa.float64(), [2.5, 3], [2.5, 3.0]),
    (pa.decimal128(5, 2), [Decimal("1.5"), 2], [Decimal("1.50"), Decimal("2.00")]),
    (pa.string(), ["a"], ["a"]),
    (pa.date32(), [dt.date(2024, 1, 2)], [dt.date(2024, 1, 2)]),
    (pa.timestamp("us"), [dt.datetime(2024, 1, 2, 3)], [dt.datetime(2024, 1, 2, 3)]),
    (
        pa.timestamp("us", "UTC"),
        [dt.datetime(2024, 1, 2, 3, tzinfo=UTC)],
        [dt.datetime(2024, 1, 2, 3, tzinfo=UTC)],
    ),
]
NOT_LOOKED_UP = [
    (pa.int64(), [5.0]),  # Spark casts the column to double
    (pa.int64(), [2.5]),
    (pa.int64(), [True]),
    (pa.int64(), [Decimal("5")]),
    (pa.int8(), [300]),  # out of range: no value of the column
    (pa.float64(), [2**53 + 1]),  # no double holds it
    (pa.decimal128(5, 2), [Decimal("1.505")]),
    (pa.decimal128(5, 2), [1.5]),
    (pa.string(), [5]),  # Spark casts the string column to a number
    (pa.date32(), [dt.datetime(2024, 1, 2)]),
    (pa.date32(), ["2024-01-02"]),
    (pa.timestamp("us"), [dt.datetime(2024, 1, 2, 3, tzinfo=UTC)]),  # NTZ column, LTZ literal
    (pa.timestamp("us", "UTC"), [dt.datetime(2024, 1, 2, 3)]),  # LTZ column, NTZ literal
    (pa.int64(), []),
]


@pytest.mark.parametrize(("kind", "values", "expected"), LOOKED_UP)
def test_literals_of_the_columns_own_type_are_looked_up(kind, values, expected):
    found = index_values(values, kind)
    assert found is not None and found.type == kind and found.to_pylist() == expected


@pytest.mark.parametrize(("kind", "values"), NOT_LOOKED_UP)
def test_other_literals_are_left_to_statistics_and_the_filter(kind, values):
    assert index_values(values, kind) is None


@pytest.mark.parametrize(
    ("column", "literal"),
    [
        ("timestamp_ntz", "TIMESTAMP '2024-01-01 12:00:00'"),
        ("timestamp", "TIMESTAMP_NTZ '2024-01-01 12:00:00'"),
    ],
)
def test_a_timestamp_literal_of_the_other_zone_kind_uses_no_record_index(column, literal):
    settings = SqlSettings(time_zone="Europe/Paris", column_types={"k": column})
    kind = pa.timestamp("us") if column == "timestamp_ntz" else pa.timestamp("us", "UTC")
    assert wanted_keys(parse_conditions(f"k = {literal}", settings), "k", {"k": kind}) is None


def test_a_double_literal_keeps_every_file_of_a_bigint_key_spark_would_match(tmp_path: Path):
    client = WriteClient.create(str(tmp_path / "t"), "id", [], None)
    big = 2**53
    for key in (big, big + 1, 5):  # a file each
        client.bulk_insert(pa.table({"id": [key], "i": [key]}))
    client.create_index("i")
    schema = client.schema()
    for where in (
        "id = 9007199254740993e0",
        "i = 9007199254740993e0",
        "id in (9.007199254740992E15)",
    ):
        kept = read_arrow_files(client.table.fs, client.file_paths(where=where), schema, "id")
        assert sorted(kept.column("id").to_pylist()) == [big, big + 1], where
    kept = client.file_paths(where="id = 9007199254740993")  # a bigint literal: one key, exact
    assert read_arrow_files(client.table.fs, kept, schema, "id").column("id").to_pylist() == [
        big + 1
    ]
