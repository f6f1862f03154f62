"""A table service (rollback, restore) whose store fails midway, on a real S3 server on
loopback (the proxy fails chosen requests): after its commit point the service took effect
and returns (what it left is cleaned later); before it, the caller gets
``StateUnknownError`` and recovery finishes the service."""

from __future__ import annotations

import re
import time

import pyarrow as pa
import pytest

from lakebraid.timeline.errors import StateUnknownError
from lakebraid.writers.client import WriteClient

FAST = {"config_kwargs": {"retries": {"total_max_attempts": 1}}}  # fail at once, no backoff
OPTIONS = {"heartbeat.interval.ms": 200, "heartbeat.expiry.ms": 1500}


def _table(url: str) -> tuple[WriteClient, str, str]:
    client = WriteClient.create(url, "k", None, "ts", storage_options=FAST, **OPTIONS)
    first = client.upsert(pa.table({"k": ["a", "b"], "v": [1, 2], "ts": [1, 1]}))
    second = client.upsert(pa.table({"k": ["a", "c"], "v": [3, 4], "ts": [2, 2]}))
    return client, first, second


def _rows(url: str) -> dict[str, int]:
    rows = WriteClient.open(url, storage_options=FAST).read_arrow()
    return dict(zip(rows["k"].to_pylist(), rows["v"].to_pylist(), strict=True))


def test_a_rollback_whose_deletes_fail_after_its_commit_point_took_effect(s3_url, s3_rule):
    url = s3_url()
    client, _, second = _table(url)
    s3_rule(lambda kind, target, _: "500" if kind in ("DELETE", "POST") else None)
    undo = client.rollback(second)  # the deletes after completion fail: no error
    s3_rule(None)
    assert _rows(url) == {"a": 1, "b": 2}
    assert second in client.table.visibility().undone and undo is not None
    assert client.validate() == []
    assert not client.table.dead_instants()


@pytest.mark.parametrize("service", ["rollback", "restore"])
def test_a_service_that_fails_before_its_commit_point_is_unknown_and_recovery_finishes_it(
    s3_url, s3_rule, service
):
    url = s3_url()
    client, first, second = _table(url)
    if service == "restore":
        client.savepoint(first)
    step = re.compile(rf"/\.braid/global/\d{{17}}\.{service}\.inflight")
    s3_rule(lambda kind, target, _: "500" if kind == "PUT" and step.search(target) else None)
    with pytest.raises(StateUnknownError, match=f"the {service} .* recovery finishes it"):
        client.rollback(second) if service == "rollback" else client.restore(first)
    s3_rule(None)
    assert _rows(url) == {"a": 3, "b": 2, "c": 4}  # nothing undone yet
    time.sleep(OPTIONS["heartbeat.expiry.ms"] / 1000 + 0.5)
    assert len(WriteClient.open(url, storage_options=FAST).recover()) == 1
    assert _rows(url) == {"a": 1, "b": 2}
    assert client.validate() == []
