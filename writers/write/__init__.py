"""One write, before any commit: input checks (``inputs``), preparing, de-duplicating and
routing rows to file groups (``route``), the file group rewrite and its Parquet files
(``filegroup``, ``encoding``) and the rules every operation shares (``operations``).
Imports nothing else of ``writers`` but ``errors`` and ``settings``."""
