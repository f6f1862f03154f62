"""The Arrow memory pool of a process that runs lakebraid.

pyarrow allocates every buffer from its default pool, mimalloc unless the environment variable
``ARROW_DEFAULT_MEMORY_POOL`` names another. On this project's machines mimalloc's first
touch of new memory costs several times that of jemalloc or the C allocator (a 500 MB
``combine_chunks`` in a new process: 1.1-1.5 s with mimalloc, 0.3 s with jemalloc or the
system allocator), and a bulk insert of 10M rows allocates a few GB: 9.9-10.4 s with mimalloc
against 7.6-8.2 s with jemalloc, peak RSS 2.5 against 2.0 GB (alternated runs of
``WriteClient.bulk_insert``). Reads and upserts measured the same with either.

So :func:`choose_pool`, run when ``lakebraid.writers.engine`` is first imported (every process
that uses lakebraid imports it through the client, Spark's Python workers included), makes
jemalloc pyarrow's default pool, unless:

* the environment variable ``ARROW_DEFAULT_MEMORY_POOL`` is set (the user chose: kept);
* ``LAKEBRAID_ARROW_POOL`` is set: ``jemalloc``, ``mimalloc`` or ``system`` names the pool,
  ``keep`` leaves pyarrow's choice (for a process that set its own pool with
  ``pa.set_memory_pool`` before importing lakebraid); any other value, or a pool this pyarrow
  lacks, is a :class:`~lakebraid.timeline.errors.ConfigError` naming the variable;
* this pyarrow was built without jemalloc: the default pool is kept.

Buffers already allocated stay with the pool that allocated them (each buffer frees through
its own pool), so the switch is safe at any time; it only changes where new buffers come from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow as pa

from lakebraid.timeline.errors import ConfigError

POOL_VARIABLE = "LAKEBRAID_ARROW_POOL"
ARROW_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
PREFERRED = "jemalloc"
POOLS = {
    "jemalloc": pa.jemalloc_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
    "system": pa.system_memory_pool,
}
KEEP = "keep"


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


def choose_pool() -> None:
    """Make the pool :func:`wanted_pool` names pyarrow's default (see the module doc)."""
    name = wanted_pool(os.environ, pa.supported_memory_backends())
    if name is not None and pa.default_memory_pool().backend_name != name:
        pa.set_memory_pool(POOLS[name]())
