"""The small partitioned table most tests use (``pythonpath`` in pyproject.toml puts this
folder on the path, so tests and state machines import it as ``table_fixtures``)."""

from __future__ import annotations

from lakebraid.timeline.table_config import FieldSpec, IndexSettings, TableConfig


def small_config(name: str = "t", index: IndexSettings | None = None) -> TableConfig:
    """Record key ``id`` (string), partitioned by ``day``, precombine ``ts`` (int64)."""
    return TableConfig(
        name=name,
        record_key="id",
        partition_fields=["day"],
        precombine_field="ts",
        schema=[
            FieldSpec("id", "string", False),
            FieldSpec("day", "string"),
            FieldSpec("ts", "int64"),
        ],
        index=index if index is not None else IndexSettings(),
    )
