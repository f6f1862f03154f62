"""A reused Spark worker freezes what it holds at its first lakebraid task out of the garbage
collector's walks, once; everything else is collected as before (``writers.write.workers``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lakebraid.writers.write.workers import REUSED_WORKER

SCRIPT = """
import gc, json, weakref
from lakebraid.writers.write import workers

gc.disable()  # only the collections below run

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

early = cycle()  # garbage from before the first task: freed, not frozen
before = gc.get_freeze_count()
first = workers.settle()
frozen = gc.get_freeze_count()
kept = early() is not None
cycle()  # a task's cyclic garbage after the freeze
collected = gc.collect()
again = workers.settle()
print(json.dumps([before, first, frozen, kept, collected, again, gc.get_freeze_count()]))
"""


def _run(env: dict[str, str]) -> list[object]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_a_reused_worker_freezes_its_objects_once_and_still_collects_a_tasks_garbage() -> None:
    env = {**os.environ, REUSED_WORKER: "1"}
    before, first, frozen, kept, collected, again, after = _run(env)
    assert before == 0 and first is True
    assert frozen > 10_000  # the imports: pyarrow, numpy, lakebraid
    assert kept is False  # the earlier cycle was freed before the freeze
    assert collected >= 2  # the two nodes of the later cycle (and their dicts)
    assert again is False and after == frozen  # no second freeze: tasks' objects stay collectable


def test_nothing_is_frozen_outside_a_reused_spark_worker() -> None:
    env = {k: v for k, v in os.environ.items() if k != REUSED_WORKER}
    before, first, frozen, kept, collected, again, after = _run(env)
    assert first is False and again is False
    assert before == frozen == after == 0
    assert kept is True  # no collection ran: nothing touched the process's objects
    assert collected >= 2
