"""How many files a read decodes at once (``writers.read.plan.read_threads``): one per core
on a local disk (at least 2), twice that where downloads can overlap decoding."""

from __future__ import annotations

import os

from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from lakebraid.writers.read.plan import read_threads


def test_one_thread_per_core_on_a_local_disk_twice_that_elsewhere() -> None:
    cores = max(2, os.cpu_count() or 2)
    assert read_threads(LocalFileSystem()) == cores
    assert read_threads(MemoryFileSystem()) == 2 * cores
