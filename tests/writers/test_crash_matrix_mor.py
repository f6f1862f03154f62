"""The crash matrix of merge-on-read tables: a writer process killed with SIGKILL at each step
of a log append (upsert, an insert of new keys, delete) and of a data compaction. As for
copy-on-write (``test_crash_matrix.py``): a reader then sees exactly the state before or after,
never a mix, ``validate()`` finds no difference, and the next write (after the dead writer's
heartbeat expires) succeeds, recovery leaving no dead instant behind."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from crash_fixtures import DAYS, KILLER, content, rows

from lakebraid.writers.client import WriteClient

pytestmark = pytest.mark.slow
OPTIONS = {
    "heartbeat.interval.ms": 50,
    "heartbeat.expiry.ms": 400,
    "compaction.inline": False,
}
INSTANT_POINTS = [
    f"{step}:{kind}"
    for step in ("request", "start", "complete")
    for kind in ("global", "data", "metadata")
]
CODE = {
    "upsert": "c.upsert(rows(['a1', 'b1', 'n3'], DAYS[0], 6, 6.0))",
    # new keys only, into the small groups' logs: the index blocks written ahead
    "insert": "c.insert(rows(['n7', 'n8'], DAYS[0], 7, 7.0))",
    "delete": "c.delete(['a2', 'b2'])",
    "compaction": "assert c.compact() is not None",
}
POINTS = {
    "upsert": [*INSTANT_POINTS, "mid-log-write", "mid-metadata-write"],
    "insert": [*INSTANT_POINTS, "mid-log-write", "mid-metadata-write"],
    "delete": [*INSTANT_POINTS, "mid-log-write", "mid-metadata-write"],
    "compaction": [*INSTANT_POINTS, "mid-data-write", "mid-metadata-write"],
}
CASES = [(op, point) for op, points in POINTS.items() for point in points]


def upsert(c: WriteClient, keys: list[str], day: str, ts: int, amount: float) -> str:
    return c.upsert(rows(keys, day, ts, amount))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("crash-mor") / "template"
    c = WriteClient.create(str(root), "id", ["day"], "ts", table_type="merge_on_read", **OPTIONS)
    c.bulk_insert(rows(["a1", "a2", "a3"], DAYS[0], 1, 1.0))
    c.bulk_insert(rows(["b1", "b2"], DAYS[1], 2, 2.0))
    upsert(c, ["a1", "b1"], DAYS[0], 3, 3.0)  # b1 moves: a delete log and an insert
    upsert(c, ["a3", "b2"], DAYS[1], 4, 4.0)
    assert [p for p in c.file_paths() if p.endswith(".log")]
    return root


@pytest.mark.parametrize(("op", "point"), CASES, ids=[f"{o}@{p}" for o, p in CASES])
def test_kill_at_every_step(template, tmp_path, run_python, op: str, point: str) -> None:
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    ref = WriteClient.open(str(reference))
    before = content(ref)
    exec(
        CODE[op],
        {"c": ref, "rows": rows, "DAYS": DAYS},
    )
    after = content(ref)
    assert op == "compaction" or before != after
    victim = tmp_path / "victim"
    shutil.copytree(template, victim)
    actions = "commit,deltacommit"
    proc = run_python(KILLER, str(victim), op, point, "", actions, CODE[op])
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == -9, f"the kill point was never reached: {out} {err[-2000:]}"
    c = WriteClient.open(str(victim))
    seen = content(c)
    assert seen in (before, after), "a reader saw a mix of before and after"
    assert c.validate() == []
    time.sleep(0.5)  # the dead writer's heartbeat expires
    upsert(c, ["next"], DAYS[2], 9, 9.0)
    final = content(c)
    assert [r for r in final if r["id"] != "next"] == seen  # a dead write rolled back
    assert any(r["id"] == "next" for r in final)
    assert c.validate() == []
    assert not c.table.dead_instants(), "recovery left a dead instant behind"
