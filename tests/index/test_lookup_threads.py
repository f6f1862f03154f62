"""How many threads a record-index lookup runs on (``index.lookup._threads``): one when the
keys asked of each group span about one row group of its base file, the reader's threads
otherwise; the keys found are the same either way."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakebraid.index import lookup
from lakebraid.index.keys import key_text
from lakebraid.writers.client import WriteClient

ROWS = 80_000  # two record-index groups of ~40k keys: three row groups of 16,384 each


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("threads") / "t")
    options = {"index.expected.records": ROWS, "metadata.record_index.min.groups": 2}
    WriteClient.create(path, "id", [], None, **options)
    ids = pa.array([f"id-{i:07d}" for i in range(ROWS)])
    WriteClient.open(path).bulk_insert(pa.table({"id": ids, "v": pa.array(range(ROWS))}))
    return path


def _decision(path: str, keys: list[str], threads: int = 2) -> tuple[int, int]:
    """The threads a real ``locate`` asks of ``map_groups`` (``most``), and its groups."""
    reader = WriteClient.open(path, **{"metadata.lookup.threads": threads}).metadata.reader()
    asked: list[tuple[int, int]] = []
    real = reader.map_groups

    def spy(work, groups, most=0):
        asked.append((most, len(groups)))
        return real(work, groups, most)

    reader.map_groups = spy  # type: ignore[method-assign]
    lookup.locate(reader, key_text(pa.array(keys)))
    assert len(asked) == 1
    return asked[0]


def test_keys_of_a_narrow_range_run_on_one_thread(table: str) -> None:
    chosen, groups = _decision(table, [f"id-{i:07d}" for i in range(0, 300, 3)])
    assert groups == 2 and chosen == 1


def test_keys_over_the_whole_range_use_the_readers_threads(table: str) -> None:
    chosen, groups = _decision(table, [f"id-{i:07d}" for i in range(0, ROWS, 800)])
    assert groups == 2 and chosen == 0
    assert _decision(table, [f"id-{i:07d}" for i in range(0, 300, 3)], threads=1)[0] == 0


def test_the_keys_found_do_not_depend_on_the_threads(table: str) -> None:
    keys = [f"id-{i:07d}" for i in (*range(0, 300, 3), *range(0, ROWS, 800))] + ["absent"]
    found = {}
    for threads in (1, 2):
        reader = WriteClient.open(table, **{"metadata.lookup.threads": threads}).metadata.reader()
        rows, at = lookup.locate(reader, key_text(pa.array(sorted(set(keys)))))
        found[threads] = (rows.sort_by("key").to_pylist(), at.null_count)
    assert found[1] == found[2] and found[1][1] == 1  # only "absent" is not found
