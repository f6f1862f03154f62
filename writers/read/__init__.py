"""Reads of the data table: one plan (listing -> prune -> paths) for the client and the
Spark data source (``plan``)."""
