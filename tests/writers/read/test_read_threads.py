"""How many files a read decodes at once (``writers.read.plan.read_threads``): one more than
the cores on a local disk (at least 2 cores counted), twice the cores where downloads can
overlap decoding."""

from __future__ import annotations

import os

from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from lakebraid.writers.read.plan import read_threads


def test_one_thread_past_the_cores_on_a_local_disk_twice_the_cores_elsewhere() -> None:
    cores = max(2, os.cpu_count() or 2)
    assert read_threads(LocalFileSystem()) == cores + 1
    assert read_threads(MemoryFileSystem()) == 2 * cores
