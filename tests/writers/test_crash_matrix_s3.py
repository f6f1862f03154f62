"""The crash matrix's protocol points on an S3 table (a moto server on loopback).

A writer process is killed with SIGKILL right after each instant file of an upsert or a delete
on each timeline, in the middle of writing a data file (on an object store nothing of it
appears: an object exists whole or not at all), and after the lease record that decides the
global completion but before the completion file is written (``decided``). Then a reader sees
exactly the state before or after the operation, ``validate()`` is clean, and the next write
settles the dead one: a decided completion is written by the next lock holder (the write
stands), any other dead write is rolled back.
"""

from __future__ import annotations

import time

import pytest
from crash_fixtures import DAYS, KILLER, OPERATION_CODE, content, rows, run_operation

from lakebraid.writers.client import WriteClient

pytestmark = pytest.mark.slow
OPTIONS = {
    "heartbeat.interval.ms": 100,
    "heartbeat.expiry.ms": 1500,
    "clean.inline": "false",
    "lock.lease.ms": 3000,  # a dead holder's lock is broken after 3 s, not the default 30
}
INSTANT_POINTS = [f"{s}:{k}" for s in ("request", "start", "complete") for k in ("data", "global")]
CASES = [
    *[("upsert", p) for p in [*INSTANT_POINTS, "mid-data-write", "decided"]],
    *[("delete", p) for p in ("start:global", "mid-data-write", "decided", "complete:global")],
]


def template(c: WriteClient) -> str:
    saved = c.insert(rows(["a1", "a2", "a3"], DAYS[0], 1, 1.0))
    c.insert(rows(["b1", "b2"], DAYS[1], 2, 2.0))
    c.upsert(rows(["a1", "b1"], DAYS[0], 3, 3.0))
    return saved


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> dict[str, tuple[list[dict], list[dict]]]:
    """(before, after) of each operation, from the same writes on local disk."""
    out = {}
    for op in ("upsert", "delete"):
        c = WriteClient.create(str(tmp_path_factory.mktemp(op) / "t"), "id", ["day"], "ts")
        saved = template(c)
        before = content(c)
        run_operation(c, op, saved)
        out[op] = (before, content(c))
    return out


@pytest.mark.parametrize(("op", "point"), CASES, ids=[f"{o}@{p}" for o, p in CASES])
def test_kill_at_each_protocol_point(expected, s3_url, run_python, op: str, point: str) -> None:
    before, after = expected[op]
    url = s3_url()
    c = WriteClient.create(url, "id", ["day"], "ts", **OPTIONS)
    saved = template(c)
    actions = "commit,deltacommit"
    proc = run_python(KILLER, url, op, point, saved, actions, OPERATION_CODE[op])
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == -9, f"the kill point was never reached: {out} {err[-2000:]}"
    c = WriteClient.open(url)
    seen = content(c)
    assert seen in (before, after), "a reader saw a mix of before and after"
    if point == "complete:global":
        assert seen == after
    if point != "decided":  # the decided completion is written by the next lock holder
        assert c.validate() == []
    time.sleep(1.6)  # the dead writer's heartbeat expires
    c.upsert(rows(["next"], DAYS[2], 9, 9.0))
    settled = [r for r in content(c) if r["id"] != "next"]
    assert settled == (after if point in ("decided", "complete:global") else seen)
    if point == "decided":
        assert seen == before, "the completion file existed before the next holder wrote it"
    assert c.validate() == []
    assert not c.table.dead_instants(), "recovery left a dead instant behind"
