"""The memory allocators of a process that runs lakebraid: the C library's ``malloc`` (glibc's
thresholds) and pyarrow's default memory pool, chosen once by :func:`choose_allocators` when
``lakebraid.writers.engine`` is first imported (every process that uses lakebraid imports it
through the client, Spark's Python workers included).

**glibc's malloc.** glibc serves a request of at least its *mmap threshold* with a new mapping
and returns the heap's free top to the system once it passes its *trim threshold*; both start
low and follow the largest block freed so far (at most 32 MiB and twice that). A read or merge
allocates and frees numpy arrays of a few MB per file slice, two or three at a time: with
glibc's defaults the heap's top passes the trim threshold at every file slice and each new
array is fresh memory, every 4 KiB page a fault. :func:`tune_malloc` fixes the mmap threshold
at 8 MiB and the trim threshold at 16 MiB: an array of a file slice comes from the heap and the
heap keeps up to 16 MiB of free memory (per arena) for the next one instead of faulting it in
again. Eight reads of a 10M-row table on one thread (60 file slices each; copy-on-write and
merge-on-read, alternated runs): 1.28-1.45M faults and 3.4-4.1 s of system time with glibc's
defaults; with thresholds of 32 and 64 MiB 0.58-0.78M faults (the rest are jemalloc's, below),
the copy-on-write reads 29% faster, the merge-on-read ones 17%, peak RSS the same (230 MB); 8
and 16 MiB fault as little (0.77M) and keep less: with 32 and 64 MiB the largest Spark Python
worker of ``make bench`` held 586-606 MiB between steps, against 373-380 untuned. Skipped, as
the user chose, when ``LAKEBRAID_MALLOC=keep`` or glibc's own variables
(``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``,
``GLIBC_TUNABLES`` naming ``glibc.malloc``) are set, and where the C library is not glibc.

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
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

import pyarrow as pa

from lakebraid.timeline.errors import ConfigError

POOL_VARIABLE = "LAKEBRAID_ARROW_POOL"
ARROW_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
MALLOC_VARIABLE = "LAKEBRAID_MALLOC"
GLIBC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
POOLS = {
    "jemalloc": pa.jemalloc_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
    "system": pa.system_memory_pool,
}
PREFERRED = "jemalloc"
KEEP = "keep"
TUNE = "tune"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 8 << 20
TRIM_THRESHOLD = 16 << 20


def wants_tuning(environ: Mapping[str, str]) -> bool:
    """Whether :func:`tune_malloc` may set glibc's thresholds given ``environ``: not when
    ``LAKEBRAID_MALLOC=keep`` or glibc's own malloc variables are set (any other value of
    ``LAKEBRAID_MALLOC`` than ``tune`` or ``keep`` is a :class:`ConfigError`)."""
    named = environ.get(MALLOC_VARIABLE, "").strip().lower()
    if named not in ("", TUNE, KEEP):
        raise ConfigError(
            f"{MALLOC_VARIABLE}={environ[MALLOC_VARIABLE]!r}: use {TUNE} (the default: "
            f"glibc's malloc thresholds set for lakebraid's reads) or {KEEP}, or unset it"
        )
    if named == KEEP or any(environ.get(v) for v in GLIBC_VARIABLES):
        return False
    return "glibc.malloc." not in environ.get("GLIBC_TUNABLES", "")


def tune_malloc() -> None:
    """Set glibc's mmap and trim thresholds (see the module doc) unless :func:`wants_tuning`
    says no or the C library is not glibc."""
    if not wants_tuning(os.environ):
        return
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl and macOS lack it)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


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


def choose_allocators() -> None:
    """Tune glibc's malloc (:func:`tune_malloc`) and make the pool :func:`wanted_pool` names
    pyarrow's default (see the module doc)."""
    tune_malloc()
    name = wanted_pool(os.environ, pa.supported_memory_backends())
    if name is not None and pa.default_memory_pool().backend_name != name:
        pa.set_memory_pool(POOLS[name]())
