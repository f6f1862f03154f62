"""Inserts find every key the table holds when the record index's base files hold many tiny
row groups (2-8 keys each, compacted every 1-3 commits), keys at, between and beyond their
bounds (empty, multi-byte, astral): ``duplicates="fail"`` refuses a batch holding a stored key,
``"drop"`` leaves such keys out, and every read equals a model. A row group a seek wrongly
skipped (``baselookup.row_groups_for``) would let a stored key in twice."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteError

ALPHABET = ["", "a", "b", "\u00e9", "z", "\U0001f600", "0", "9"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_inserts_find_every_stored_key_across_tiny_row_groups(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = str(tmp_path / "t")
    options = {
        "metadata.base.row.group.rows": rng.choice([2, 3, 5, 8]),
        "metadata.compact.max.log.files": rng.choice([1, 2, 3]),
    }
    WriteClient.create(path, "id", [], None, **options)
    held: set[str] = set()
    for _ in range(30):
        batch = sorted({"".join(rng.choices(ALPHABET, k=rng.randint(1, 4))) for _ in range(12)})
        clash = [k for k in batch if k in held]
        client = WriteClient.open(path)
        write = client.insert if rng.random() < 0.5 else client.bulk_insert
        rows = pa.table({"id": batch, "v": list(range(len(batch)))})
        if clash:
            with pytest.raises(WriteError):
                write(rows, duplicates="fail")
        write(rows, duplicates="drop")
        held |= set(batch)
        got = WriteClient.open(path).read_arrow().column("id").to_pylist()
        assert sorted(got) == sorted(held)
    assert WriteClient.open(path).validate() == []
