"""``metadata.writer``: record-index upserts given with their keys' hashes
(``InstantChanges.index_hashes``) are routed by them, to the groups their keys hash to; hashes
out of step with their keys are refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.hashing import file_groups_of, stable_hashes
from lakebraid.metadata.writer import InstantChanges
from lakebraid.writers.client import WriteClient

OPTIONS = {"metadata.record_index.min.groups": 4, "metadata.record_index.commit.bases": False}
TIME = "20261123100000001"
FILE_ID = "00000000-0000-0000-0000-000000000007"


def upserts(n: int) -> pa.Table:
    keys = [f"k{i:05d}" for i in range(n)]
    return pa.table({"key": keys, "partition": [""] * n, "file_id": [FILE_ID] * n})


def written(path: Path, changes: InstantChanges) -> list[tuple[str, int]]:
    """The (group, entries) of the logs a new table's metadata writes for ``changes``, and
    (first) the table's record-index group count."""
    client = WriteClient.create(str(path), "id", [], None, **OPTIONS)
    logs = client.metadata.write(TIME, changes)
    n = client.metadata.read_point().group_counts["record_index"]
    return [("groups", n), *sorted((log.file_group, log.records) for log in logs)]


def test_entries_with_their_hashes_go_where_their_keys_hash_to(tmp_path: Path) -> None:
    rows = upserts(500)
    hashes = stable_hashes(rows.column("key"))
    given = written(tmp_path / "given", InstantChanges(index_upserts=rows, index_hashes=hashes))
    n = given[0][1]
    assert n >= 4
    counts = np.bincount(file_groups_of(rows.column("key").to_pylist(), n), minlength=n)
    groups = sorted((f"record_index-{g:04d}", int(c)) for g, c in enumerate(counts.tolist()) if c)
    expected = [("groups", n), *groups]
    assert given == expected
    assert written(tmp_path / "hashed", InstantChanges(index_upserts=rows)) == expected


def test_hashes_out_of_step_with_their_keys_are_refused(tmp_path: Path) -> None:
    rows = upserts(500)
    shifted = np.roll(stable_hashes(rows.column("key")), 1)
    with pytest.raises(MetadataValueError, match="hashes given do not match"):
        written(tmp_path / "t", InstantChanges(index_upserts=rows, index_hashes=shifted))
    assert not list((tmp_path / "t" / ".braid" / "metadata" / "record_index").glob("*.log"))
