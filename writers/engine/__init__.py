"""The engines that run a write: in-process (``inprocess``: pyarrow on threads) and Spark
(``spark``: the session, the pipeline of Spark tasks, the data source).

Importing this package (as ``lakebraid``'s client does, in every process that runs lakebraid,
Spark's Python workers included) chooses the process's Arrow memory pool once:
:func:`~lakebraid.writers.engine.memory.choose_pool`."""

from lakebraid.writers.engine.memory import choose_pool

choose_pool()
