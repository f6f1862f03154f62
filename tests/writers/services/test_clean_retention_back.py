"""A rollback leaves fewer visible commits, so "the last clean.retain.commits commits" start at
an older commit than the previous clean kept from. The cleaner must not move its retention
back: the previous clean already deleted the data files and metadata file slices that reads
before its retained point needed, so a files listing as of the older point is read from what
is left of the metadata table and is incomplete, and the clean deletes live files."""

import pytest
from table_fixtures import versioned_rows

from lakebraid.timeline.as_of import AsOfError
from lakebraid.timeline.errors import LakebraidError
from lakebraid.writers.client import WriteClient

OPTS = {
    "clean.retain.commits": 2,
    "clean.inline": False,
    "compaction.inline": False,
    "metadata.compact.max.log.files": 0,
    "archive.inline": False,
}


def _state(client, as_of=None):
    t = client.read_arrow(as_of=as_of)
    return dict(zip(t.column("id").to_pylist(), t.column("v").to_pylist(), strict=True))


def _retained(client):
    cleans = [h for h in client.history() if h["action"] == "clean"]
    return [h["details"]["earliest_retained"] for h in sorted(cleans, key=lambda h: h["time"])]


def test_clean_after_rollback_keeps_retention_and_live_files(tmp_path):
    c = WriteClient.create(
        str(tmp_path / "t"), "id", ["p"], "ts", table_type="merge_on_read", **OPTS
    )
    c1 = c.upsert(versioned_rows([f"k{i}" for i in range(10)], 1))  # base file
    c.savepoint(c1)  # the next cleans scan every commit since c1
    c.upsert(versioned_rows(["n0", "n1"], 2))  # log: two new rows
    c3 = c.compact(min_log_files=1)  # compaction commit: a new base holding c1 + c2
    c4 = c.upsert(versioned_rows(["k2", "k3"], 4))  # log over that base
    assert c.compact_metadata() is not None  # folds the metadata logs of c1..c4
    c5 = c.upsert(versioned_rows(["k4"], 5))
    at_c3, at_c4, at_c5 = _state(c, c3), _state(c, c4), _state(c)
    assert {"n0", "n1"} <= at_c3.keys() and c3 is not None
    c6 = c.upsert(versioned_rows(["k5"], 6))

    assert c.clean() is not None  # keeps from c5: deletes c4's metadata slices (folded)
    c.rollback(c6)
    assert _state(c) == at_c5
    c.clean()  # the last 2 visible commits now start at c4

    assert _state(c) == at_c5  # the current snapshot's base (c3) and log (c4) are kept
    assert c.validate() == []
    assert _retained(c)[-1] == c5, "the retention stays at c5: it never moves back"
    # before the retention: refused, never silently old rows; the message names what was given
    with pytest.raises(AsOfError, match=f"as_of '{c4}' \\(read point "):
        _state(c, c4)
    c.rollback(c5)
    assert _state(c) == at_c4
    with pytest.raises(LakebraidError, match="older than the retention of the last clean"):
        c.rollback(c4)  # its older files are gone: refused, not c1's rows silently
    assert _state(c) == at_c4 and c.validate() == []
    assert at_c3 != at_c4
