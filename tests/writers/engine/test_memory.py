"""The allocators lakebraid chooses for its process (``writers.engine.memory``): glibc's malloc
thresholds and the Arrow memory pool."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pyarrow as pa
import pytest

from lakebraid.timeline.errors import ConfigError
from lakebraid.writers.engine.memory import hugepage_advice, malloc_mode, wanted_pool

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
    ("environ", "expected"),
    [
        ({}, "retain"),
        ({"LAKEBRAID_MALLOC": "tune"}, "tune"),
        ({"LAKEBRAID_MALLOC": " Retain "}, "retain"),
        ({"LAKEBRAID_MALLOC": " KEEP "}, None),
        ({"MALLOC_TRIM_THRESHOLD_": "65536"}, None),  # the user's (or Dask's) own choice
        ({"MALLOC_MMAP_THRESHOLD_": "1000000"}, None),
        ({"MALLOC_MMAP_MAX_": "0"}, None),
        ({"MALLOC_TOP_PAD_": "0", "LAKEBRAID_MALLOC": "tune"}, None),  # glibc's own variable wins
        ({"MALLOC_TRIM_THRESHOLD_": ""}, "retain"),  # set but empty: not a choice
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, None),
        ({"GLIBC_TUNABLES": "glibc.rtld.nns=8"}, "retain"),  # tunables of something else
        ({"PYTHON_WORKER_FACTORY_SECRET": "x"}, "tune"),  # a Spark Python worker
        ({"PYTHON_WORKER_FACTORY_SECRET": "x", "LAKEBRAID_MALLOC": "retain"}, "retain"),
    ],
)
def test_malloc_mode(environ: dict[str, str], expected: str | None) -> None:
    assert malloc_mode(environ) == expected


def test_a_bad_malloc_choice_is_an_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        malloc_mode({"LAKEBRAID_MALLOC": "fast"})
    assert "LAKEBRAID_MALLOC='fast'" in str(caught.value)
    for mode in ("retain", "tune", "keep"):
        assert mode in str(caught.value)


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


GLIBC = platform.libc_ver()[0] == "glibc"
CHOSEN = (
    "LAKEBRAID_ARROW_POOL",
    "ARROW_DEFAULT_MEMORY_POOL",
    "LAKEBRAID_MALLOC",
    "GLIBC_TUNABLES",
    "NUMPY_MADVISE_HUGEPAGE",
)


def _pool_in_new_process(**variables: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import pyarrow as pa\n"
        "before = pa.default_memory_pool().backend_name\n"
        "import lakebraid\n"
        "print(before, pa.default_memory_pool().backend_name)\n"
    )
    return _new_process(code, variables)


def _new_process(code: str, variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if k not in CHOSEN and not k.startswith("MALLOC_")
    }
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
        ({"LAKEBRAID_MALLOC": "keep"}, "mimalloc jemalloc"),  # malloc's choice apart
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


FAULTS = """
import resource
import numpy as np
import lakebraid
base = np.arange(400_000, dtype=np.int64)  # 3.2 MB
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):  # two arrays at a time, as a merge of one file slice allocates them
    a = base + 1
    b = a * 2
    del a, b
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_tuned_malloc_reuses_freed_arrays_instead_of_faulting_new_pages() -> None:
    """Measured by page faults, not time: glibc's own thresholds return the freed arrays'
    memory at every round (each of the 200 arrays faults its ~780 pages in again); in both
    modes the heap keeps it."""
    faults = {}
    for choice in ("retain", "tune", "keep"):
        done = _new_process(FAULTS, {"LAKEBRAID_MALLOC": choice})
        assert done.returncode == 0, done.stderr
        faults[choice] = int(done.stdout)
    assert faults["keep"] > 50 * 780  # glibc's own thresholds: fresh pages round after round
    assert faults["tune"] < 3 * 780  # tuned: the first round's two arrays, then none
    assert faults["retain"] < 3 * 780


BIG = """
import os
import numpy as np
import lakebraid
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
a = np.ones(10_000_000)  # a 10M-row write's hashes or orders: 80 MB
held = resident()
del a
print(held - resident())
"""


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_retained_malloc_keeps_the_arrays_of_a_big_write() -> None:
    """By resident memory, not time: an 80 MB array passes ``tune``'s 8 MiB mmap threshold, so
    freeing it unmaps it (the next one is faulted in afresh); ``retain`` serves it from the
    heap, which keeps it resident for the next."""
    given_back = {}
    for choice in ("retain", "tune"):
        done = _new_process(BIG, {"LAKEBRAID_MALLOC": choice})
        assert done.returncode == 0, done.stderr
        given_back[choice] = int(done.stdout)
    assert given_back["tune"] > 70_000_000
    assert given_back["retain"] < 10_000_000


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"NUMPY_MADVISE_HUGEPAGE": "1"}, None),  # numpy applied the user's choice
        ({"NUMPY_MADVISE_HUGEPAGE": "0"}, None),
    ],
)
def test_hugepage_advice(environ: dict[str, str], expected: bool | None) -> None:
    assert hugepage_advice(environ) is expected


ADVICE = """
from numpy._core import multiarray
import lakebraid
print(multiarray._get_madvise_hugepage())
"""


@pytest.mark.parametrize(
    ("variables", "expected"), [({}, "False"), ({"NUMPY_MADVISE_HUGEPAGE": "1"}, "True")]
)
def test_importing_lakebraid_turns_numpys_hugepage_advice_off(variables, expected) -> None:
    """Unless the user asked numpy for it: a new process, numpy imported first."""
    done = _new_process(ADVICE, variables)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [expected]
