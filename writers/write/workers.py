"""Hygiene of the long-lived Python worker processes that run lakebraid's tasks for Spark.

PySpark reuses a Python worker for task after task (``spark.python.worker.reuse``, on by
default; the JVM then sets ``SPARK_REUSE_WORKER`` in the worker's environment), and its daemon
runs a full ``gc.collect()`` after every task. A full collection walks every tracked object of
the process: pyspark's, pyarrow's, numpy's and lakebraid's modules, some 70,000 objects, 20-90
ms each time on this kind of machine, about as long as rewriting a small file group.

:func:`settle` (called first by every function lakebraid runs in a Spark worker) moves the
objects the process holds at its first lakebraid task, its imports above all, into the
permanent generation (``gc.freeze``) once per process, after one collection so that no garbage
is kept. The collections after each task then walk only what was allocated since. Frozen
objects stay alive as long as something refers to them, as before: a module, a class or a
cache is never collected in a worker anyway. Objects a task creates are collected as usual.
Nothing changes outside a reused Spark worker (the driver, the in-process engine, tests).
"""

from __future__ import annotations

import gc
import os

REUSED_WORKER = "SPARK_REUSE_WORKER"  # set by Spark in a worker it reuses across tasks
_settled = False  # this process froze its objects already


def settle() -> bool:
    """Freeze this worker's objects out of the garbage collector's walks, once per process;
    returns whether this call did it (False: not a reused Spark worker, or done before)."""
    global _settled
    if _settled or not os.environ.get(REUSED_WORKER):
        return False
    gc.collect()  # what is garbage now is freed, not frozen
    gc.freeze()
    _settled = True
    return True
