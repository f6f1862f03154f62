"""Fixtures of the write tests: a spy on the batches of new small groups, and a Parquet
write that fails at its n-th call."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import lakebraid.writers.engine.rewrites as rewrites
import lakebraid.writers.write.filegroup as filegroup


@pytest.fixture
def batches(monkeypatch) -> list[int]:
    """The number of groups of each ``write_new_groups`` call the in-process engine makes."""
    sizes: list[int] = []
    real = rewrites.write_new_groups

    def spy(tasks, *args, **kwargs):
        sizes.append(len(tasks))
        return real(tasks, *args, **kwargs)

    monkeypatch.setattr(rewrites, "write_new_groups", spy)
    return sizes


@pytest.fixture
def fail_parquet_write(monkeypatch) -> Callable[[int], list[int]]:
    """``fail_parquet_write(n)``: data files' Parquet writes raise ``OSError("disk full
    (injected)")`` at the n-th call (none after it); returns the list of calls made."""
    real = filegroup.pq.write_table

    def arm(n: int) -> list[int]:
        calls: list[int] = []

        def failing(*args, **kwargs):
            calls.append(1)
            if len(calls) == n:
                raise OSError("disk full (injected)")
            return real(*args, **kwargs)

        monkeypatch.setattr(filegroup.pq, "write_table", failing)
        return calls

    return arm
