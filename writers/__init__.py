"""The write client of lakebraid: ``from lakebraid import WriteClient`` (or from
``lakebraid.writers``).

Importing the package also wires the Spark data source into every session a client uses
(``writers.client.SESSION_HOOKS``): ``writers.datasource`` imports the client, never the
reverse.
"""

from lakebraid.metadata.records import RecordLocation as Location
from lakebraid.writers import client, datasource
from lakebraid.writers.client import WriteClient

client.SESSION_HOOKS.append(datasource.register)

__all__ = ["Location", "WriteClient"]
