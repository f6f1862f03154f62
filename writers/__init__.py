"""The write client of lakebraid: ``from writers import WriteClient``."""

from metadata.records import RecordLocation as Location
from writers.client import WriteClient

__all__ = ["Location", "WriteClient"]
