"""The commit point on an object store when the store fails around the deciding lease record
(a real S3 server on loopback; the proxy fails chosen requests): the writer reports
``StateUnknownError``, never rolls back a decision that stands, and ``recover()`` makes it
visible."""

from __future__ import annotations

import re
from collections.abc import Callable

import pyarrow as pa
import pytest

from lakebraid import WriteClient
from lakebraid.timeline.errors import DecisionUnknownError, StateUnknownError
from lakebraid.timeline.instant import Action, State
from lakebraid.writers.errors import WriteConflictError

DECIDING = b'"pending":{'  # the body of the lease record that decides a completion
# one attempt per request (botocore), so an outage fails fast; s3fs retries only SlowDown
FAST = {"config_kwargs": {"retries": {"total_max_attempts": 1}}}
COMPLETED_GLOBAL = re.compile(r"/\.braid/global/\d{17}_\d{17}\.commit")


def _after_decision(fault: str, kind: str, pattern: str) -> Callable[[str, str, bytes], str | None]:
    """Fail every ``kind`` request on a path matching ``pattern`` once a deciding lease
    record was created (an outage that outlasts every retry)."""
    armed = []

    def chosen(request: str, target: str, body: bytes) -> str | None:
        if request == "PUT" and "/.braid/lease/" in target and DECIDING in body:
            armed.append(target)
            return None
        return fault if armed and request == kind and re.search(pattern, target) else None

    return chosen


def _table(url: str) -> WriteClient:
    client = WriteClient.create(url, record_key="k", precombine="ts", storage_options=FAST)
    client.upsert(pa.table({"k": ["a"], "v": [1], "ts": [1]}))
    return client


def _global(client: WriteClient) -> list[tuple[str, str]]:
    return [(i.action.value, i.state.value) for i in client.timeline("global")]


@pytest.mark.parametrize("fault", ["500", "reset"])
def test_a_failed_check_after_the_decision_is_unknown_and_recover_makes_it_visible(
    s3_url, loopback_s3, s3_rule, fault
):
    url = s3_url()
    client = _table(url)
    s3_rule(_after_decision(fault, "LIST", r"prefix=[^&]*\.braid%2Flease|\.braid/lease"))
    with pytest.raises(DecisionUnknownError, match="whether it completed is unknown"):
        client.insert(pa.table({"k": ["b"], "v": [2], "ts": [2]}))
    s3_rule(None)
    other = WriteClient.open(url)
    assert ("rollback", "completed") not in _global(other)  # its writer undid nothing
    assert other.recover() == []  # the decided commit is written, not rolled back
    assert sorted(other.read_arrow()["k"].to_pylist()) == ["a", "b"]
    assert _global(other).count(("commit", "completed")) == 2
    other.upsert(pa.table({"k": ["c"], "v": [3], "ts": [3]}))
    assert sorted(other.read_arrow()["k"].to_pylist()) == ["a", "b", "c"]


def test_a_failed_write_of_the_decided_instant_file_is_unknown_and_settled_by_the_next_write(
    s3_url, loopback_s3, s3_rule
):
    url = s3_url()
    client = _table(url)
    s3_rule(
        lambda kind, target, body: (
            "503" if kind == "PUT" and COMPLETED_GLOBAL.search(target) else None
        )
    )
    with pytest.raises(StateUnknownError, match="do not retry the write"):
        client.insert(pa.table({"k": ["b"], "v": [2], "ts": [2]}))
    s3_rule(None)
    other = WriteClient.open(url)
    assert sorted(other.read_arrow()["k"].to_pylist()) == ["a"]  # decided, not yet written
    c = pa.table({"k": ["c"], "v": [3], "ts": [3]})
    try:
        other.upsert(c)  # takes the lock: writes b's instant file first
    except WriteConflictError:  # it planned before b was visible, in b's file group
        assert sorted(other.read_arrow()["k"].to_pylist()) == ["a", "b"]
        other.upsert(c)
    assert sorted(other.read_arrow()["k"].to_pylist()) == ["a", "b", "c"]
    assert _global(other).count(("commit", "completed")) == 3  # a, b (never undone), c


def test_an_own_rollback_of_a_commit_that_completed_after_all_does_nothing(tmp_path):
    from lakebraid.writers.services.rollback import rollback

    client = _table(str(tmp_path / "t"))
    time = client.insert(pa.table({"k": ["b"], "v": [2], "ts": [2]}))
    assert rollback(client.table, time, own=True) is None
    assert sorted(client.read_arrow()["k"].to_pylist()) == ["a", "b"]
    assert all(i.action is not Action.ROLLBACK for i in client.timeline("global"))
    assert client.timeline("global")[-1].state is State.COMPLETED
