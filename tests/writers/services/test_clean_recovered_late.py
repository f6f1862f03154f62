"""A clean whose writer died midway is finished by recovery after later cleans completed: the
retained history is the latest horizon any clean cut, not the horizon of the clean completed
last. validate() finds no problem, and a read as of a point only the earlier clean kept is
refused as beyond retention, not failed on a missing file."""

from __future__ import annotations

import time

import pytest
from table_fixtures import versioned_rows

from lakebraid.timeline.as_of import AsOfError
from lakebraid.timeline.errors import StateUnknownError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.services import clean as clean_module

OPTS = {
    "clean.retain.commits": 2,
    "clean.inline": False,
    "compaction.inline": False,
    "archive.inline": False,
    "heartbeat.expiry.ms": 600_000,
}


def test_a_clean_recovered_after_later_cleans_keeps_the_latest_horizon(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "t")
    client = WriteClient.create(root, "id", ["p"], "ts", **OPTS)
    times = [client.upsert(versioned_rows([f"k{i}" for i in range(4)], 1))]
    for v in range(2, 6):
        times.append(client.upsert(versioned_rows(["k1"], v)))

    def dies(*args: object) -> None:
        raise RuntimeError("killed")

    with monkeypatch.context() as patch:
        patch.setattr(clean_module, "execute_clean", dies)
        with pytest.raises(StateUnknownError):
            client.clean()  # left requested: its writer "died"
    for v in range(6, 10):
        times.append(client.upsert(versioned_rows(["k1"], v)))
    assert client.clean() is not None  # a later clean, a later horizon: it deletes more
    later = WriteClient.open(root, **{"heartbeat.interval.ms": 1, "heartbeat.expiry.ms": 2})
    time.sleep(0.05)
    assert later.recover()  # the first clean completes last
    assert later.validate() == []
    with pytest.raises(AsOfError):
        later.read_arrow(as_of=times[4])
    later.read_arrow(as_of=times[-1])
