"""An index build (a secondary index or column statistics) run while a writer process commits.

The build's read of the table (:data:`READS`: the function each kind of build reads it through)
waits until the writer has committed three times more, and the writer upserts until three of
its upserts began once the build had finished (the test touches a flag file then): so commits
land before, during and after the build whatever the machine's speed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from table_fixtures import wait_for_commits

from lakebraid.index import column_stats_build, secondary_build
from lakebraid.writers.client import WriteClient

# the module and name of the function through which each kind of index build reads the table
READS = {
    "secondary": (secondary_build, "_entries_as_of"),
    "column_stats": (column_stats_build, "_rows_as_of"),
}

# ROWS: the definition of ``rows(step)``, the table the writer upserts at ``step``
WRITER = """
import json, os, sys
import pyarrow as pa
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteConflictError
c, built = WriteClient.open(sys.argv[1]), sys.argv[2]
ROWS
done, conflicts, after = [], 0, 0
for step in range(1, 201):
    if after == 3:
        break
    began_after = os.path.exists(built)
    try:
        done.append([c.upsert(rows(step)), step])
        after += began_after
    except WriteConflictError:
        conflicts += 1
print(json.dumps({"done": done, "conflicts": conflicts}), flush=True)
"""


class BuildRun(NamedTuple):
    """The build's instant, the writer's commits as (instant, step) in completion order (one
    writer), those that completed before, during and after the build, and the table opened
    afresh once both ended."""

    built: str
    done: list[tuple[str, int]]
    before: list[str]
    during: list[str]
    after: list[str]
    fresh: WriteClient


def build_beside_writer(
    client: WriteClient,
    run_python: Callable[..., Any],
    monkeypatch: Any,
    folder: Path,
    *,
    kind: str,
    columns: str | list[str],
    rows: str,
) -> BuildRun:
    """Build an index of ``kind`` on ``columns`` (``WriteClient.create_index``) while a writer
    process upserts ``rows(step)`` (``rows``: its definition, Python source) into
    ``client``'s table; see the module doc."""
    module, name = READS[kind]
    original = getattr(module, name)

    def slow(*args: Any) -> Any:  # runs on until the writer has committed three times more
        wait_for_commits(client, 3)
        return original(*args)

    monkeypatch.setattr(module, name, slow)
    flag = folder / "built"
    proc = run_python(WRITER.replace("ROWS", rows), client.path, str(flag))
    wait_for_commits(client, 3)
    try:
        built = client.create_index(columns, kind=kind)
    finally:
        flag.touch()  # the writer stops three upserts later
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out)
    print(f"{len(result['done'])} upserts committed, {result['conflicts']} conflicted")
    fresh = WriteClient.open(client.path)
    finished = next(i.completion_time for i in fresh.timeline("metadata") if i.time == built)
    completed = {i.time: i.completion_time for i in fresh.timeline() if i.is_completed}
    done = [(t, step) for t, step in result["done"]]
    times = [t for t, _ in done]
    before = [t for t in times if completed[t] < built]
    during = [t for t in times if built < completed[t] < finished]
    after = [t for t in times if completed[t] > finished]
    print(f"commits before / during / after the build: {len(before)} {len(during)} {len(after)}")
    return BuildRun(built, done, before, during, after, fresh)
