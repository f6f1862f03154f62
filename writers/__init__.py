"""The write client of lakebraid: ``from writers import WriteClient``.

Importing the package also wires the Spark data source into every session a client uses
(``writers.client.SESSION_HOOKS``): ``writers.datasource`` imports the client, never the
reverse.
"""

from metadata.records import RecordLocation as Location
from writers import client, datasource
from writers.client import WriteClient

client.SESSION_HOOKS.append(datasource.register)

__all__ = ["Location", "WriteClient"]
