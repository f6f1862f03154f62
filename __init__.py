"""lakebraid: transactional tables for data lakes (``from lakebraid import WriteClient``).

The repository root is this package (``pyproject.toml`` maps it): ``lakebraid.timeline``
(instants, the three timelines, read points), ``lakebraid.metadata`` (the metadata table),
``lakebraid.index`` (record keys and the record index) and ``lakebraid.writers`` (the write
client, engines, table services, CLI).
"""

from lakebraid.writers import Location, WriteClient

__all__ = ["Location", "WriteClient"]
