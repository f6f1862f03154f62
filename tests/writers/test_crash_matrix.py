"""The crash matrix: a writer process killed with SIGKILL at each step of each operation.

For every (operation, kill point): a real subprocess runs the operation on a copy of one
template table and kills itself (SIGKILL) right after the step; then a reader sees exactly the
state before or after the operation (never a mix), ``validate()`` finds no difference, and the
next write (after the dead writer's heartbeat expires) succeeds and is visible. The matrix is
printed (``pytest -s``) and checked to have a real kill at every point.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from crash_fixtures import DAYS, KILLER, OPERATION_CODE, content, rows, run_operation

from lakebraid.writers.client import WriteClient

pytestmark = pytest.mark.slow
OPTIONS = {"heartbeat.interval.ms": 50, "heartbeat.expiry.ms": 400, "clean.retain.commits": 2}
INSTANT_POINTS = [
    f"{step}:{kind}"
    for step in ("request", "start", "complete")
    for kind in ("global", "data", "metadata")
]
OPERATIONS = {
    "insert": [*INSTANT_POINTS, "mid-data-write", "mid-metadata-write"],
    "upsert": [*INSTANT_POINTS, "mid-data-write", "mid-metadata-write"],
    "delete": [*INSTANT_POINTS, "mid-data-write", "mid-metadata-write"],
    "wide insert": [*INSTANT_POINTS, "mid-data-write", "mid-metadata-write"],
    "twenty-partition insert": ["start:data", "mid-data-write", "complete:global"],
    "rollback": [*INSTANT_POINTS, "mid-delete"],
    "restore": [*INSTANT_POINTS, "mid-delete"],
    "delete savepoint": INSTANT_POINTS,
    "clean": [*INSTANT_POINTS, "mid-delete"],
    "compaction": ["request:metadata", "start:metadata", "complete:metadata", "mid-base-write"],
}
ACTIONS = {
    "insert": {"commit", "deltacommit"},
    "upsert": {"commit", "deltacommit"},
    "delete": {"commit", "deltacommit"},
    "wide insert": {"commit", "deltacommit"},
    "twenty-partition insert": {"commit", "deltacommit"},
    "rollback": {"rollback"},
    "restore": {"restore"},
    "delete savepoint": {"rollback"},
    "clean": {"clean"},
    "compaction": {"compaction"},
}
MATRIX: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("crash") / "template"
    c = WriteClient.create(str(root), "id", ["day"], "ts", **OPTIONS)
    saved = c.insert(rows(["a1", "a2", "a3"], DAYS[0], 1, 1.0))
    c.savepoint(saved)
    c.insert(rows(["b1", "b2"], DAYS[1], 2, 2.0))
    c.upsert(rows(["a1", "b1"], DAYS[0], 3, 3.0))
    c.upsert(rows(["a3", "b2"], DAYS[1], 4, 4.0))
    return root, saved


CASES = [(op, point) for op, points in OPERATIONS.items() for point in points]


@pytest.mark.parametrize(("op", "point"), CASES, ids=[f"{o}@{p}" for o, p in CASES])
def test_kill_at_every_step(template, tmp_path, run_python, op: str, point: str) -> None:
    root, saved = template
    reference = tmp_path / "reference"
    shutil.copytree(root, reference)
    ref = WriteClient.open(str(reference))
    before = content(ref)
    run_operation(ref, op, saved)
    after = content(ref)
    victim = tmp_path / "victim"
    shutil.copytree(root, victim)
    proc = run_python(
        KILLER, str(victim), op, point, saved, ",".join(ACTIONS[op]), OPERATION_CODE[op]
    )
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == -9, f"the kill point was never reached: {out} {err[-2000:]}"
    c = WriteClient.open(str(victim))
    seen = content(c)
    assert seen in (before, after), "a reader saw a mix of before and after"
    MATRIX[(op, point)] = "after" if seen == after and before != after else "before"
    assert c.validate() == []
    time.sleep(0.5)  # the dead writer's heartbeat expires
    c.upsert(rows(["next"], DAYS[2], 9, 9.0))
    final = content(c)
    settled = [r for r in final if r["id"] != "next"]
    # recovery rolls a dead write back (a completed one stays) and finishes a dead undo
    assert settled == (after if op in ("rollback", "restore", "clean") else seen)
    assert any(r["id"] == "next" for r in final)
    assert c.validate() == []
    assert not c.table.dead_instants(), "recovery left a dead instant behind"


def test_print_matrix() -> None:
    """Prints the matrix of the cases this worker ran (run with -s to see it)."""
    if not MATRIX:
        pytest.skip("the crash cases ran in another worker")
    points = sorted({p for _, p in MATRIX})
    lines = [f"{'operation':<11}" + "".join(f"{p:>20}" for p in points)]
    for op in OPERATIONS:
        cells = [MATRIX.get((op, p), "-") for p in points]
        lines.append(f"{op:<11}" + "".join(f"{c:>20}" for c in cells))
    print("\ncrash matrix (state a reader saw after the kill):\n" + "\n".join(lines))
    print(f"{len(MATRIX)} kill points checked")
    assert all(v in ("before", "after") for v in MATRIX.values())


@pytest.mark.parametrize("point", ["start:global", "mid-metadata-write"])
def test_a_power_loss_may_keep_inflights_without_their_requests(
    template, tmp_path, run_python, point: str
) -> None:
    """The data and metadata requested instants are owed to the write (paid at its settle),
    so a power loss before the commit point may keep a write's inflight files without them:
    a writer killed after its inflights, its two requested files then removed. Readers see
    the table as before, and recovery rolls the write back by its global request."""
    root, saved = template
    victim = tmp_path / "victim"
    shutil.copytree(root, victim)
    before = content(WriteClient.open(str(victim)))
    code = OPERATION_CODE["upsert"]
    proc = run_python(KILLER, str(victim), "upsert", point, saved, "commit,deltacommit", code)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == -9, f"the kill point was never reached: {out} {err[-2000:]}"
    pending = sorted((victim / ".braid" / "global").glob("*.commit.requested"))[-1]
    time_ = pending.name.split(".")[0]
    lost = [
        victim / ".braid" / "timeline" / f"{time_}.commit.requested",
        victim / ".braid" / "metadata" / ".braid" / "timeline" / f"{time_}.deltacommit.requested",
    ]
    for path in lost:
        assert path.with_name(path.name.replace("requested", "inflight")).exists()
        path.unlink()
    c = WriteClient.open(str(victim))
    assert content(c) == before
    assert c.validate() == []
    time.sleep(0.5)  # the dead writer's heartbeat expires
    c.upsert(rows(["next"], DAYS[2], 9, 9.0))
    assert [r for r in content(c) if r["id"] != "next"] == before
    assert c.validate() == []
    assert not c.table.dead_instants(), "recovery left a dead instant behind"
    # archival takes the undone write, its inflights alone, with the rest
    for i in range(4):
        c.upsert(rows([f"more{i}"], DAYS[2], 10 + i, 10.0))
    assert c.archive(keep=2) is not None
    c = WriteClient.open(str(victim))
    assert not (victim / ".braid" / "timeline" / f"{time_}.commit.inflight").exists()
    assert [r for r in content(c) if not r["id"].startswith(("next", "more"))] == before
    assert c.validate() == []
