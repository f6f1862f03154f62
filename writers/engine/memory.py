"""The memory allocators of a process that runs lakebraid: the C library's ``malloc`` (glibc's
thresholds) and pyarrow's default memory pool, chosen once by :func:`choose_allocators` when
``lakebraid.writers.engine`` is first imported (every process that uses lakebraid imports it
through the client, Spark's Python workers included).

**glibc's malloc.** glibc serves a request of at least its *mmap threshold* with a new mapping
(unmapped again when freed) and returns the heap's free top to the system once it passes its
*trim threshold*; both start low and follow the largest block freed so far (at most 32 MiB and
twice that). Memory given back costs a page fault per 4 KiB page when it is used again, and on
a virtual machine whose host reclaims the guest's free memory (free page reporting, as on this
project's build machines) each such fault costs the host's work too: an 80 MB numpy array
freed and allocated again 1 s later took 0.2-1.0 s of system time against 10 ms when reused at
once. A 10M-row bulk insert allocates and frees such arrays by the dozen (hashes, orders,
masks, taken columns).

:func:`tune_malloc` sets one of two modes (``LAKEBRAID_MALLOC``):

* ``retain`` (the default): no block is served by its own mapping (``M_MMAP_MAX`` 0; blocks
  too big for a thread's heap still are) and the heap keeps up to 2 GiB of free memory
  (``M_TRIM_THRESHOLD``, the largest ``mallopt`` takes): what a write frees is reused by its
  next step and the next write instead of being faulted in again. A 10M-row bulk insert
  (``benchmarks/upsert.py``'s, each in a new process, 12 alternated pairs) faulted in 1.0 GB
  instead of 1.3 GB; its time swings with the host (2.6-6.2 s of system time for the same
  faults), median 6.2 s against 7.6 with ``tune`` (3.6-7.5 against 4.7-9.4); the upserts and
  deletes after it the same; peak RSS 2.0-2.1 GB against 1.85-1.9. The cost: a process keeps
  the memory its largest step freed (up to its peak) until it exits.
  Not in Spark's Python workers (``PYTHON_WORKER_FACTORY_SECRET`` set): a worker serves the
  tasks of every job of its executor beside the JVM's memory, so it keeps ``tune``
  (``spark_engine.py``, three alternated pairs: bulk insert 62.0 / 44.3 / 32.6 s retained
  against 38.2 / 45.9 / 26.9 tuned; the largest worker's peak 781 MiB in the first retained
  run against 557 in the last tuned ``make bench``).
* ``tune``: the mmap threshold fixed at 8 MiB and the trim threshold at 16 MiB, so the arrays
  of one file slice's read come from the heap and at most 16 MiB of free memory is kept (eight
  reads of a 10M-row table: 0.77M faults against 1.28-1.45M with glibc's own thresholds,
  reads 17-29% faster); for processes that must give memory back between steps.

``LAKEBRAID_MALLOC=keep``, or glibc's own variables (``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_MMAP_MAX_``, ``MALLOC_TOP_PAD_``, ``GLIBC_TUNABLES``
naming ``glibc.malloc``), leave glibc as the user set it, as does a C library that is not
glibc.

**pyarrow's pool.** pyarrow allocates every buffer from its default pool, mimalloc unless the
environment variable ``ARROW_DEFAULT_MEMORY_POOL`` names another. :func:`choose_allocators` makes it
jemalloc: mimalloc's first touch of new memory costs several times jemalloc's (a 10M-row bulk
insert 9.9-10.4 s against 7.6-8.2, peak RSS 2.5 against 2.0 GB). The system pool (glibc's
malloc, tuned as above) reads faster still (the eight reads: 15-17% less time than jemalloc,
whose large blocks are faulted in again: 0.6M faults against 60k) but fragments glibc's heap in
a process that writes for long: 300 appends of 20k rows in one process grew its RSS by 443 MB
against 177 with jemalloc. So jemalloc stays the default; ``LAKEBRAID_ARROW_POOL=system``
chooses the system pool for a process that reads more than it writes. The pool is kept, or
named, as the user chose:

* the environment variable ``ARROW_DEFAULT_MEMORY_POOL`` is set: kept;
* ``LAKEBRAID_ARROW_POOL`` is set: ``jemalloc``, ``mimalloc`` or ``system`` names the pool,
  ``keep`` leaves pyarrow's choice (for a process that set its own pool with
  ``pa.set_memory_pool`` before importing lakebraid); any other value, or a pool this pyarrow
  lacks, is a :class:`~lakebraid.timeline.errors.ConfigError` naming the variable;
* this pyarrow lacks the preferred pool: the default pool is kept.

Buffers already allocated stay with the pool that allocated them (each buffer frees through
its own pool), so the switch is safe at any time; it only changes where new buffers come from.

**numpy's huge-page advice.** numpy asks the kernel for transparent huge pages
(``madvise(MADV_HUGEPAGE)``) on every array of 4 MiB or more. Where the kernel's THP
``defrag`` setting is ``madvise`` (its default, and this project's build machines'), a fault
in such an array compacts memory on the spot to find a 2 MiB page; in a process whose heap
has been written and freed, that stalls: a 10M-row bulk insert's first sort of its rows by
file group took 0.85-0.97 s with the advice against 0.10 s without, and the whole insert
(``benchmarks/upsert.py --skip-delta --skip-iceberg``, two alternated pairs of processes)
6.11 and 5.84 s against 3.73 and 3.98 s. :func:`choose_allocators` turns the advice off
(numpy's ``_set_madvise_hugepage``) unless the environment variable
``NUMPY_MADVISE_HUGEPAGE`` is set: numpy has then applied the user's choice itself.
"""

from __future__ import annotations

import ctypes
import importlib
import os
from collections.abc import Mapping

import pyarrow as pa

from lakebraid.timeline.errors import ConfigError

POOL_VARIABLE = "LAKEBRAID_ARROW_POOL"
ARROW_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
MALLOC_VARIABLE = "LAKEBRAID_MALLOC"
HUGEPAGE_VARIABLE = "NUMPY_MADVISE_HUGEPAGE"  # numpy's own, read when numpy is imported
SPARK_WORKER = "PYTHON_WORKER_FACTORY_SECRET"  # set by Spark for its Python workers alone
GLIBC_VARIABLES = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_TOP_PAD_",
)
POOLS = {
    "jemalloc": pa.jemalloc_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
    "system": pa.system_memory_pool,
}
PREFERRED = "jemalloc"
KEEP = "keep"
TUNE = "tune"
RETAIN = "retain"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4  # glibc's mallopt (malloc.h)
MODES = {  # mallopt settings of each mode (module doc)
    RETAIN: ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1)),
    TUNE: ((M_MMAP_THRESHOLD, 8 << 20), (M_TRIM_THRESHOLD, 16 << 20)),
}


def malloc_mode(environ: Mapping[str, str]) -> str | None:
    """The mode :func:`tune_malloc` sets given ``environ`` (``retain`` unless
    ``LAKEBRAID_MALLOC`` names another; ``tune`` in a Spark Python worker); None: glibc
    left as it is, for ``LAKEBRAID_MALLOC=keep`` or glibc's own malloc variables. Any other value of
    ``LAKEBRAID_MALLOC`` is a :class:`ConfigError`."""
    named = environ.get(MALLOC_VARIABLE, "").strip().lower()
    if named not in ("", RETAIN, TUNE, KEEP):
        raise ConfigError(
            f"{MALLOC_VARIABLE}={environ[MALLOC_VARIABLE]!r}: use {RETAIN} (the default: freed "
            f"memory kept for reuse), {TUNE} (at most 16 MiB kept) or {KEEP} (glibc's own "
            "thresholds), or unset it"
        )
    if named == KEEP or any(environ.get(v) for v in GLIBC_VARIABLES):
        return None
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return None
    return named or (TUNE if SPARK_WORKER in environ else RETAIN)


def tune_malloc() -> None:
    """Set glibc's malloc to the mode :func:`malloc_mode` names (see the module doc), unless it
    names none or the C library is not glibc."""
    mode = malloc_mode(os.environ)
    if mode is None:
        return
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl and macOS lack it)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    for parameter, value in MODES[mode]:
        mallopt(parameter, value)


def wanted_pool(environ: Mapping[str, str], supported: list[str]) -> str | None:
    """The pool to make the default given the environment ``environ`` and the backends this
    pyarrow supports (``pa.supported_memory_backends()``); None keeps the default."""
    named = environ.get(POOL_VARIABLE, "").strip().lower()
    if named == KEEP:
        return None
    if named:
        if named not in POOLS:
            choices = ", ".join([*POOLS, KEEP])
            raise ConfigError(
                f"{POOL_VARIABLE}={environ[POOL_VARIABLE]!r} names no Arrow memory pool: "
                f"use one of {choices}, or unset it"
            )
        if named not in supported:
            raise ConfigError(
                f"{POOL_VARIABLE}={named}: this pyarrow has no {named} pool "
                f"(it has {', '.join(supported)}); name one of those or unset it"
            )
        return named
    if environ.get(ARROW_VARIABLE):
        return None
    return PREFERRED if PREFERRED in supported else None


def hugepage_advice(environ: Mapping[str, str]) -> bool | None:
    """Whether numpy should advise huge pages, given ``environ``: off, unless the user set
    ``NUMPY_MADVISE_HUGEPAGE`` (None: numpy has applied it already)."""
    return None if HUGEPAGE_VARIABLE in environ else False


def advise_hugepages() -> None:
    """Apply :func:`hugepage_advice` to numpy (see the module doc); a numpy without the
    switch is left as it is."""
    wanted = hugepage_advice(os.environ)
    if wanted is None:
        return
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, then 1
        switch = getattr(_imported(module), "_set_madvise_hugepage", None)
        if switch is not None:
            switch(wanted)
            return


def _imported(name: str) -> object:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def choose_allocators() -> None:
    """Tune glibc's malloc (:func:`tune_malloc`), make the pool :func:`wanted_pool` names
    pyarrow's default and set numpy's huge-page advice (see the module doc)."""
    tune_malloc()
    advise_hugepages()
    name = wanted_pool(os.environ, pa.supported_memory_backends())
    if name is not None and pa.default_memory_pool().backend_name != name:
        pa.set_memory_pool(POOLS[name]())
