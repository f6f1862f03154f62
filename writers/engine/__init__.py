"""The engines that run a write: in-process (``inprocess``: pyarrow on threads) and Spark
(``spark``: the session, the pipeline of Spark tasks, the data source).

Importing this package (as ``lakebraid``'s client does, in every process that runs lakebraid,
Spark's Python workers included) chooses the process's memory allocators once (glibc's malloc
thresholds, the Arrow memory pool):
:func:`~lakebraid.writers.engine.memory.choose_allocators`."""

from lakebraid.writers.engine.memory import choose_allocators

choose_allocators()
