"""A restore to a savepoint undoes commits that a reindex or an index build folded; after a
clean, the record-index logs (and data files) of the older undone commits are gone, so the
keys they touched cannot be read from them. The corrected bases must still equal the index as
of the savepoint: before, the record index lost the keys deleted after the savepoint and kept
keys inserted after it (a later upsert then held a key twice, a delete removed nothing)."""

from __future__ import annotations

import pyarrow as pa

from lakebraid.writers.client import WriteClient

OPTS = {"clean.retain.commits": 3, "clean.inline": False, "archive.inline": False}


def _rows(keys: list[str], ts: int, part: str = "a", user: str = "u0") -> pa.Table:
    n = len(keys)
    return pa.table({"id": keys, "p": [part] * n, "ts": [ts] * n, "user": [user] * n})


def _restored(tmp_path, rewrite: str) -> tuple[WriteClient, str]:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["p"], "ts", **OPTS)
    saved = c.upsert(_rows([f"k{i:02d}" for i in range(20)], 1))
    c.savepoint(saved)
    c.delete(["k00", "k01"])
    c.upsert(_rows([f"k{i:02d}" for i in range(20, 30)], 2, user="u1"))
    c.upsert(_rows(["k05"], 3, user="u2"))
    if rewrite == "reindex":
        c.reindex(3)
    else:
        c.create_index("user")
    for key in ("k02", "k03", "k04"):
        c.delete([key])
    assert c.clean() is not None  # the commits before the last three lose their logs
    c.restore(saved)
    return c, saved


def test_restore_across_a_reindex_after_a_clean_keeps_the_index_exact(tmp_path) -> None:
    c, _ = _restored(tmp_path, "reindex")
    keys = [f"k{i:02d}" for i in range(30)]
    found = c.lookup(keys)
    assert sorted(k for k, v in found.items() if v is not None) == keys[:20]
    assert c.validate() == []
    c.upsert(_rows(["k00"], 9, part="b"))  # a move: the old row must go
    c.delete(["k01"])
    ids = c.read_arrow().column("id").to_pylist()
    assert ids.count("k00") == 1 and "k01" not in ids
    assert c.validate() == []


def test_restore_across_an_index_build_after_a_clean_keeps_it_exact(tmp_path) -> None:
    c, _ = _restored(tmp_path, "secondary")
    assert c.validate() == []  # compares the secondary index's entries with the files
    assert c.read_arrow().num_rows == 20
    for user, files in (("u0", 1), ("u1", 0), ("u2", 0)):  # the savepoint's rows are all u0
        assert len(c.file_paths(where=f"user = '{user}'")) == files
