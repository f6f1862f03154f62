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

import pyarrow as pa
import pytest

from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.client import WriteClient

pytestmark = pytest.mark.slow
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
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
    "rollback": [*INSTANT_POINTS, "mid-delete"],
    "restore": [*INSTANT_POINTS, "mid-delete"],
    "clean": [*INSTANT_POINTS, "mid-delete"],
    "compaction": ["request:metadata", "start:metadata", "complete:metadata", "mid-base-write"],
}
ACTIONS = {
    "insert": {"commit", "deltacommit"},
    "upsert": {"commit", "deltacommit"},
    "delete": {"commit", "deltacommit"},
    "rollback": {"rollback"},
    "restore": {"restore"},
    "clean": {"clean"},
    "compaction": {"compaction"},
}
MATRIX: dict[tuple[str, str], str] = {}


def rows(keys: list[str], day: str, ts: int, amount: float) -> pa.Table:
    n = len(keys)
    return pa.table({"id": keys, "day": [day] * n, "ts": [ts] * n, "amount": [amount] * n})


OPERATION_CODE = {
    "insert": "c.insert(rows(['n1', 'n2'], DAYS[2], 5, 5.0))",
    "upsert": "c.upsert(rows(['a1', 'b1', 'n3'], DAYS[0], 6, 6.0))",
    "delete": "c.delete(['a2', 'b2'])",
    "rollback": "c.rollback(c.timeline()[-1].time)",
    "restore": "c.restore(SAVED)",
    "clean": "c.clean()",
    "compaction": "MetadataTable(c.table).compact()",
}


def run_operation(c: WriteClient, name: str, saved: str) -> None:
    exec(
        OPERATION_CODE[name],
        {"c": c, "rows": rows, "DAYS": DAYS, "SAVED": saved, "MetadataTable": MetadataTable},
    )


KILLER = """
import os, signal, sys
import pyarrow as pa
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.store import InstantStore
import lakebraid.metadata.basefile, lakebraid.metadata.writer, lakebraid.metadata.table
import lakebraid.writers.services.clean, lakebraid.writers.services.rollback
import lakebraid.writers.write.filegroup
from lakebraid import metadata, writers
from lakebraid.writers.client import WriteClient

path, op, point, saved, actions = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
actions = set(actions.split(","))
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
if ":" in point:
    step, kind = point.split(":")
    original = getattr(InstantStore, step)
    def patched(self, k, time, action, *args, **kwargs):
        result = original(self, k, time, action, *args, **kwargs)
        if k.value == kind and action.value in actions:
            die()
        return result
    setattr(InstantStore, step, patched)
elif point == "mid-data-write":
    def torn(table, where, **kwargs):
        handle = open(where, "wb") if isinstance(where, str) else where
        handle.write(b"PAR1 torn")
        handle.flush()
        die()
    writers.write.filegroup.pq.write_table = torn
elif point == "mid-metadata-write":
    def torn_log(fs, path, blobs):
        with open(path, "ab") as out:
            out.write(blobs[0][: len(blobs[0]) // 2])
        die()
    metadata.writer.append_blocks = torn_log
elif point == "mid-base-write":
    def torn_base(fs, path, table, **kwargs):
        with open(path + ".inprogress", "wb") as out:
            out.write(b"PAR1 torn")
        die()
    metadata.table.write_base = torn_base
elif point == "mid-delete":
    for module in (writers.services.rollback, writers.services.clean):
        original_remove = module.remove
        def remove_then_die(*args, _original=original_remove):
            _original(*args)
            die()
        module.remove = remove_then_die
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
def rows(keys, day, ts, amount):
    n = len(keys)
    return pa.table({"id": keys, "day": [day] * n, "ts": [ts] * n, "amount": [amount] * n})
c = WriteClient.open(path)
exec(sys.argv[6], {"c": c, "rows": rows, "DAYS": DAYS, "SAVED": saved,
                   "MetadataTable": MetadataTable})
print("finished without being killed")
"""


def content(c: WriteClient) -> list[dict]:
    return c.read_arrow().sort_by("id").select(["id", "day", "ts", "amount"]).to_pylist()


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
