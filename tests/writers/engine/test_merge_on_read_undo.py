"""Merge-on-read tables under read-optimized reads and savepoint/restore: a read-optimized read
returns the base files' rows only (what the table held at each group's last compaction), a
restore to a savepoint taken between log appends returns data, index and listing to that
point, the appended logs after it leave the disk, and writes go on from there."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest
from table_fixtures import DAYS

from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError

COLUMNS = ["id", "day", "ts", "amount"]
KEYS = [f"k{i}" for i in range(6)]


def rows(client: WriteClient, as_of: str | None = None, mode: str = "snapshot") -> dict:
    found = client.read_arrow(as_of, mode=mode).select(COLUMNS).to_pylist()
    assert len(found) == len({r["id"] for r in found}), "a key appears twice"
    return {r["id"]: (r["day"], r["ts"], r["amount"]) for r in found}


def change(ids: list[str], ts: int, amount: float, day: str = DAYS[0]) -> pa.Table:
    n = len(ids)
    return pa.table({"id": ids, "day": [day] * n, "ts": [ts] * n, "amount": [amount] * n})


def merge_on_read(tmp_path, **options) -> WriteClient:
    c = WriteClient.create(
        str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read", **options
    )
    c.bulk_insert(change(KEYS, 0, 0.0))
    return c


def test_a_read_optimized_read_returns_the_bases_only(tmp_path) -> None:
    c = merge_on_read(tmp_path, **{"compaction.inline": False})
    bulk = {k: (DAYS[0], 0, 0.0) for k in KEYS}
    c.upsert(change(["k0"], 1, 5.0))
    c.delete(["k1"])
    c.insert(change(["new"], 1, 7.0))  # into the small group's log
    c.upsert(change(["k2"], 2, 9.0, DAYS[1]))  # moves: a delete log and a new base in d1
    snapshot = {**bulk, "k0": (DAYS[0], 1, 5.0), "new": (DAYS[0], 1, 7.0)}
    snapshot.pop("k1")
    snapshot["k2"] = (DAYS[1], 2, 9.0)
    assert rows(c) == snapshot
    # the bulk insert's base as it was, and the new group's base holding the moved row: k2
    # is in both (its old group's delete is in a log), as in Hudi's read-optimized view
    base_rows = sorted([*((k, *v) for k, v in bulk.items()), ("k2", DAYS[1], 2, 9.0)])
    optimized = c.read_arrow(mode="read_optimized").select(COLUMNS).to_pylist()
    assert sorted(tuple(r.values()) for r in optimized) == base_rows
    frame = c.read(mode="read_optimized").select(*COLUMNS).collect()
    assert sorted(tuple(r) for r in frame) == base_rows
    assert c.compact() is not None
    assert rows(c, mode="read_optimized") == rows(c) == snapshot


@pytest.mark.parametrize("bad", ["ro", "SNAPSHOT", None, 1])
def test_an_unknown_read_mode_is_refused_by_name(tmp_path, bad) -> None:
    c = merge_on_read(tmp_path)
    refused = r"read mode .* is not one of 'snapshot', 'read_optimized'"
    with pytest.raises(InputError, match=refused):
        c.read_arrow(mode=bad)
    with pytest.raises(InputError, match=re.escape(repr(bad))):
        c.read(mode=bad)


def test_a_copy_on_write_table_reads_the_same_in_both_modes(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "cow"), "id", ["day"], "ts")
    c.bulk_insert(change(KEYS, 0, 0.0))
    c.upsert(change(["k0"], 1, 5.0))
    assert rows(c, mode="read_optimized") == rows(c)


def test_restore_to_a_savepoint_between_log_appends(tmp_path) -> None:
    c = merge_on_read(tmp_path, **{"compaction.inline": False, "clean.inline": False})
    saved = c.upsert(change(["k0", "k1"], 1, 1.0))
    at_saved = rows(c)
    assert at_saved["k0"] == (DAYS[0], 1, 1.0)
    c.savepoint(saved)
    logs_at_saved = {p for p in c.file_paths() if p.endswith(".log")}
    c.upsert(change(["k2", "n1"], 2, 2.0))
    c.delete(["k3"])
    assert c.compact() is not None  # folds the saved log and the later ones into a new base
    c.upsert(change(["k0"], 3, 3.0, DAYS[2]))  # moves k0 away
    later = {p for p in c.file_paths()} - logs_at_saved
    c.restore(saved)
    assert rows(c) == at_saved
    assert {k: (at.partition if at else None) for k, at in c.lookup([*KEYS, "n1"]).items()} == {
        **{k: "day=" + DAYS[0] for k in KEYS},
        "n1": None,
    }
    assert not later & set(c.file_paths())
    assert logs_at_saved <= set(c.file_paths())
    assert c.validate() == []
    for path in later:  # the files of the undone writes and compaction left the disk
        assert not os.path.exists(path), path
    c.upsert(change(["k1", "n2"], 4, 4.0))
    expected = {**at_saved, "k1": (DAYS[0], 4, 4.0), "n2": (DAYS[0], 4, 4.0)}
    assert rows(c) == expected and c.validate() == []
    assert c.compact() is not None and rows(c) == expected and c.validate() == []
