"""A column of a DataFrame by its exact name. Spark reads a bare name as a path (``a.b``: field
``b`` of struct ``a``), so a table column whose name holds a dot or a backtick is quoted."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def column(name: str) -> Column:
    """The column named exactly ``name``."""
    return F.col("`" + name.replace("`", "``") + "`")
