"""Service helpers shared by every table service (``writers.services.lifecycle``)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import fsspec

from lakebraid.writers.services.lifecycle import remove_tree

TREES = 30


def _build(root: Path) -> None:
    for tree in range(TREES):
        for day in range(20):
            folder = root / f"t{tree}" / f"day={day}" / "sub"
            folder.mkdir(parents=True)
            for n in range(3):
                (folder / f"f{n}.marker").write_bytes(b"")


def _remove_all(root: str, go, errors) -> None:  # type: ignore[no-untyped-def]
    fs = fsspec.filesystem("file")
    go.wait()
    for tree in range(TREES):
        try:
            remove_tree(fs, f"{root}/t{tree}")
        except Exception as exc:  # reported to the parent
            errors.put(f"t{tree}: {exc!r}")
    errors.put(None)


def test_processes_removing_the_same_folders_at_once_all_succeed(tmp_path: Path) -> None:
    """A writer's rollback and another writer's cleaner both delete an undone instant's
    markers folder: neither may fail because the other removed part of it first (plain
    ``fs.rm(recursive=True)`` fails here with FileNotFoundError about 100 times in 120)."""
    _build(tmp_path)
    ctx = mp.get_context("spawn")
    go, errors = ctx.Barrier(4), ctx.Queue()
    workers = [ctx.Process(target=_remove_all, args=(str(tmp_path), go, errors)) for _ in range(4)]
    for worker in workers:
        worker.start()
    reported, finished = [], 0
    while finished < len(workers):
        item = errors.get(timeout=120)
        if item is None:
            finished += 1
        else:
            reported.append(item)
    for worker in workers:
        worker.join(timeout=60)
    assert reported == []
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert list(tmp_path.iterdir()) == []


def test_removing_a_folder_that_is_gone_is_fine(tmp_path: Path) -> None:
    fs = fsspec.filesystem("file")
    remove_tree(fs, str(tmp_path / "never-made"))
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"x")
    remove_tree(fs, str(tmp_path / "a"))
    assert not (tmp_path / "a").exists()
