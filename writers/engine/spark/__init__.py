"""The Spark engine: the session (``session``, which registers the data source), the write
pipeline as Spark tasks (``pipeline``, ``write``) and the ``lakebraid`` data source
(``datasource``)."""
