"""Partition paths never leave the table; encoding round-trips; table.json round-trips."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakebraid.timeline import table_config
from lakebraid.timeline.errors import ConfigError, InvalidPathError
from lakebraid.timeline.layout import (
    MAX_SEGMENT_BYTES,
    TableLayout,
    data_file_name,
    encode_value,
    parse_data_file_name,
    parse_partition_path,
    partition_path,
)
from lakebraid.timeline.table import TableTimelines

ROOT = "/lake/tables/t"


def inside(relative: str) -> bool:
    full = os.path.normpath(TableLayout(ROOT).partition_dir(relative))
    return full == ROOT or full.startswith(ROOT + "/")


@pytest.mark.parametrize(
    "value", ["../x", "a/../../b", "..", ".", "/etc/passwd", "a\x00b", "\x00", "%2e%2e", "a\\b"]
)
def test_hostile_values_are_encoded_inside_the_table(value: str) -> None:
    rel = partition_path(["day"], [value])
    assert inside(rel)
    assert "\x00" not in rel and rel.count("/") == 0  # one segment, no separator, no NUL
    assert parse_partition_path(rel, ["day"]) == (value,)


def test_very_long_values_are_refused_with_the_field_name() -> None:
    with pytest.raises(InvalidPathError, match="'day' is too long"):
        partition_path(["day"], ["x" * (MAX_SEGMENT_BYTES + 1)])
    with pytest.raises(InvalidPathError, match="too long"):
        partition_path(["day"], ["é" * 80])  # 80 chars, 480 encoded bytes


@pytest.mark.parametrize("field", ["../x", "a/b", "", "1day", "day\x00", "d=ay"])
def test_bad_field_names_refused(field: str) -> None:
    with pytest.raises(InvalidPathError):
        partition_path([field], ["v"])


def test_null_and_literal_null_marker_are_distinct() -> None:
    null, literal = partition_path(["d"], [None]), partition_path(["d"], ["__null__"])
    assert null != literal
    assert parse_partition_path(null, ["d"]) == (None,)
    assert parse_partition_path(literal, ["d"]) == ("__null__",)


def test_partition_dir_refuses_unencoded_relative_paths() -> None:
    for rel in ["../x", "day=../x", "day=a/..", "day=%zz"]:
        with pytest.raises(InvalidPathError):
            TableLayout(ROOT).partition_dir(rel)


@given(
    st.lists(st.one_of(st.none(), st.text(max_size=30)), min_size=1, max_size=3),
)
def test_partition_path_round_trips_and_stays_inside(values: list[str | None]) -> None:
    fields = [f"f{i}" for i in range(len(values))]
    sizes = [len(f"{f}={encode_value(v)}".encode()) for f, v in zip(fields, values, strict=True)]
    if max(sizes) > MAX_SEGMENT_BYTES:  # too long once encoded: refused, never truncated
        with pytest.raises(InvalidPathError, match="too long"):
            partition_path(fields, values)
        return
    rel = partition_path(fields, values)
    assert parse_partition_path(rel, fields) == tuple(values)
    assert inside(rel)
    assert len(rel.split("/")) == len(fields)


def test_data_file_names_round_trip_and_refuse_bad_parts() -> None:
    fid = "0b7e1c3a-1f2d-4c5b-9a8e-7d6c5b4a3f21"
    name = data_file_name(fid, "0-1-2", "20261122153000123")
    parsed = parse_data_file_name(name)
    assert parsed.file_id == fid and parsed.write_token == "0-1-2"
    assert parsed.instant == "20261122153000123"
    with pytest.raises(InvalidPathError):
        data_file_name("../etc", "0", "20261122153000123")
    with pytest.raises(InvalidPathError):
        data_file_name(fid, "a/b", "20261122153000123")


schema_types = st.sampled_from(
    [
        pa.string(),
        pa.int64(),
        pa.int32(),
        pa.float64(),
        pa.bool_(),
        pa.date32(),
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("ms"),
        pa.decimal128(12, 3),
        pa.binary(),
        pa.list_(pa.int64()),
        pa.large_string(),
    ]
)


@given(
    st.lists(st.tuples(schema_types, st.booleans()), min_size=1, max_size=8),
    st.sampled_from(table_config.TABLE_TYPES),
    st.sampled_from(table_config.SCOPES),
)
def test_table_config_round_trips(columns, table_type, scope) -> None:
    schema = pa.schema(
        [pa.field("id", pa.string(), False)]
        + [pa.field(f"c{i}", t, n) for i, (t, n) in enumerate(columns)]
    )
    config = table_config.TableConfig(
        format_version=table_config.version_for(table_type, scope),
        name="t",
        record_key="id",
        schema=table_config.schema_to_fields(schema),
        partition_fields=["c0"],
        index=table_config.IndexSettings(record_index_scope=scope),
        options={"heartbeat.expiry.ms": "5000"},
        table_type=table_type,
    )
    data = table_config.encode(config)
    back = table_config.decode(data, path="/t/.braid/table.json")
    assert back == config
    assert back.arrow_schema() == schema
    assert back.merge_on_read == (table_type == "merge_on_read")
    assert back.format_version == (3 if back.merge_on_read else 1 if scope == "global" else 2)


def test_table_type_is_checked_against_its_format_version() -> None:
    base = dict(name="t", record_key="id", schema=[table_config.FieldSpec("id", "string")])
    with pytest.raises(ConfigError, match=r"table_type must be one of .*'merge-on-read'"):
        table_config.TableConfig(format_version=3, table_type="merge-on-read", **base).validate()
    with pytest.raises(ConfigError, match="merge_on_read needs format_version 3"):
        table_config.TableConfig(format_version=2, table_type="merge_on_read", **base).validate()
    old = b'{"format_version": 1, "name": "t", "record_key": "id", "schema": []}'
    assert table_config.decode(old, path="/t/.braid/table.json").table_type == "copy_on_write"


def test_unknown_format_version_is_refused(new_table) -> None:
    table = new_table()
    path = table.layout.table_config
    text = open(path).read().replace('"format_version": 1', '"format_version": 99')
    with open(path, "w") as handle:
        handle.write(text)
    with pytest.raises(ConfigError, match=r"version 99.*upgrade lakebraid"):
        TableTimelines.open(table.path)


def test_create_twice_and_open_missing(new_table, tmp_path) -> None:
    new_table("a")
    with pytest.raises(ConfigError, match="already exists"):
        new_table("a")
    with pytest.raises(ConfigError, match="no lakebraid table"):
        TableTimelines.open(str(tmp_path / "nothing"))


def test_config_validation_names_the_problem() -> None:
    base = dict(name="t", schema=[table_config.FieldSpec("id", "string")])
    with pytest.raises(ConfigError, match="record key column 'key'"):
        table_config.TableConfig(record_key="key", **base).validate()
    with pytest.raises(ConfigError, match="partition field 'day'"):
        table_config.TableConfig(record_key="id", partition_fields=["day"], **base).validate()
    with pytest.raises(ConfigError, match="not supported"):
        table_config.text_to_type("struct<a: int64>")


def test_a_table_config_naming_the_record_index_flag_still_opens() -> None:
    """Tables written while ``index.record_index`` existed (always true) keep opening."""
    data = (
        b'{"format_version": 1, "name": "t", "record_key": "id", "schema": [], '
        b'"index": {"record_index": true, "record_index_file_groups": 4}, "options": {}, '
        b'"created_at": "20261122153000123"}'
    )
    config = table_config.decode(data, path="/t/.braid/table.json")
    assert config.index.record_index_file_groups == 4
    assert b'"record_index"' not in table_config.encode(config)
