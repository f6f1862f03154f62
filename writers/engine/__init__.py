"""The engines that run a write: in-process (``inprocess``: pyarrow on threads) and Spark
(``spark``: the session, the pipeline of Spark tasks, the data source)."""
