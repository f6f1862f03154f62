"""The write client of lakebraid: ``from lakebraid import WriteClient`` (or from
``lakebraid.writers``). Its rooms: ``write`` (one write before its commit), ``commit`` (the
transaction), ``engine`` (in-process and Spark), ``read`` (the read plan), ``services``
(rollback, restore, clean, recovery, validate) and ``cli``; ``client`` is the facade over
them."""

from lakebraid.metadata.records import RecordLocation as Location
from lakebraid.writers.client import WriteClient

__all__ = ["Location", "WriteClient"]
