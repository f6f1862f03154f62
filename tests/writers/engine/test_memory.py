"""The Arrow memory pool lakebraid chooses for its process (``writers.engine.memory``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from lakebraid.timeline.errors import ConfigError
from lakebraid.writers.engine.memory import wanted_pool

ALL = ["mimalloc", "jemalloc", "system"]


@pytest.mark.parametrize(
    ("environ", "supported", "expected"),
    [
        ({}, ALL, "jemalloc"),  # nothing said: jemalloc
        ({}, ["mimalloc", "system"], None),  # a pyarrow without jemalloc: its default kept
        ({"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}, ALL, None),  # the user's Arrow choice kept
        ({"ARROW_DEFAULT_MEMORY_POOL": ""}, ALL, "jemalloc"),  # set but empty: not a choice
        ({"LAKEBRAID_ARROW_POOL": "system"}, ALL, "system"),
        ({"LAKEBRAID_ARROW_POOL": " MiMalloc "}, ALL, "mimalloc"),
        ({"LAKEBRAID_ARROW_POOL": "keep"}, ALL, None),
        # lakebraid's own variable outranks Arrow's
        (
            {"LAKEBRAID_ARROW_POOL": "system", "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"},
            ALL,
            "system",
        ),
    ],
)
def test_wanted_pool(environ: dict[str, str], supported: list[str], expected: str | None) -> None:
    assert wanted_pool(environ, supported) == expected


@pytest.mark.parametrize(
    ("value", "supported", "words"),
    [
        ("jemaloc", ALL, ["LAKEBRAID_ARROW_POOL", "'jemaloc'", "jemalloc, mimalloc, system, keep"]),
        ("jemalloc", ["mimalloc", "system"], ["LAKEBRAID_ARROW_POOL", "no jemalloc pool"]),
    ],
)
def test_a_bad_pool_name_is_an_error_naming_the_variable(
    value: str, supported: list[str], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        wanted_pool({"LAKEBRAID_ARROW_POOL": value}, supported)
    for word in words:
        assert word in str(caught.value)


def _pool_in_new_process(**variables: str) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LAKEBRAID_ARROW_POOL", "ARROW_DEFAULT_MEMORY_POOL")
    }
    code = (
        "import pyarrow as pa\n"
        "before = pa.default_memory_pool().backend_name\n"
        "import lakebraid\n"
        "print(before, pa.default_memory_pool().backend_name)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**environ, **variables},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif("jemalloc" not in pa.supported_memory_backends(), reason="no jemalloc")
@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, "mimalloc jemalloc"),
        ({"ARROW_DEFAULT_MEMORY_POOL": "system"}, "system system"),
        ({"LAKEBRAID_ARROW_POOL": "keep"}, "mimalloc mimalloc"),
        ({"LAKEBRAID_ARROW_POOL": "system"}, "mimalloc system"),
    ],
)
def test_importing_lakebraid_sets_the_pool(variables: dict[str, str], expected: str) -> None:
    if "mimalloc" not in pa.supported_memory_backends():
        pytest.skip("this pyarrow's default is not mimalloc")
    done = _pool_in_new_process(**variables)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == expected.split()


def test_importing_lakebraid_with_a_bad_pool_fails_loudly() -> None:
    done = _pool_in_new_process(LAKEBRAID_ARROW_POOL="fast")
    assert done.returncode != 0
    assert "LAKEBRAID_ARROW_POOL='fast' names no Arrow memory pool" in done.stderr
