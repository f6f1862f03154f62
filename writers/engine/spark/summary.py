"""What the driver needs from a Spark write's tagged rows to plan its insert slots: per
(partition, old partition, old file id) the rows and the new rows among them (a key the
table does not hold, or one moving in from another partition).

Each tagging task counts its own rows with pyarrow (:func:`task_counts`) and adds them to a
Spark accumulator (:class:`CountsParam`); the driver reads it after the one job that builds
the cache of the tagged rows (``DataFrame.count``), instead of Spark aggregating every tagged
row by three strings (9% of the executor threads' CPU samples of a 1M-row upsert, and a job
stage of its own). Spark merges the counts of each successful task attempt; a map stage run
again (a lost shuffle output) may add a task's counts twice. The counts only size the plan
(how many new file groups, the rewrite's task count), and every new row is routed by hash
range whatever the counts, so such an excess never changes what is written; nor does it
change whether any key is held (a positive count stays positive).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakebraid.index.keys import key_text
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.writers.read.columns import column
from lakebraid.writers.write.filegroup import OP, OP_UPSERT
from lakebraid.writers.write.route import PARTITION, duplicate_keys_error

Group = tuple[str, str | None, str | None]  # partition, old partition, old file id
Counts = dict[Group, tuple[int, int]]  # -> (rows, new rows)


class CountsParam(AccumulatorParam):
    """Spark accumulator of :data:`Counts`: added per group."""

    def zero(self, value: Counts) -> Counts:
        return {}

    def addInPlace(self, value1: Counts, value2: Counts) -> Counts:
        for group, (rows, new) in value2.items():
            had_rows, had_new = value1.get(group, (0, 0))
            value1[group] = (had_rows + rows, had_new + new)
        return value1


def task_counts(tagged: pa.Table) -> Counts:
    """The :data:`Counts` of one task's tagged rows (plain string work columns)."""
    if tagged.num_rows == 0:
        return {}
    old, now = tagged.column(OLD_PARTITION), tagged.column(PARTITION)
    moved = pc.fill_null(pc.or_kleene(pc.is_null(old), pc.not_equal(old, now)), True)
    new = pc.and_(pc.equal(tagged.column(OP), OP_UPSERT), moved)
    keys = [PARTITION, OLD_PARTITION, OLD_FILE_ID]
    table = pa.table({**{k: tagged.column(k) for k in keys}, "new": new.cast(pa.int64())})
    grouped = table.group_by(keys, use_threads=False).aggregate([("new", "count"), ("new", "sum")])
    columns = [grouped.column(c).to_pylist() for c in [*keys, "new_count", "new_sum"]]
    return {(p, op, of): (n, s) for p, op, of, n, s in zip(*columns, strict=True)}


def summarize(
    cached: DataFrame,
    counts: Accumulator[Counts],
    key: str,
    existing: str | None,
    operation: str,
    table: str,
) -> tuple[dict[str, int], dict[tuple[str, str], int], int]:
    """New rows per partition, the existing file groups touched (with the rows each receives:
    updates, deletes, a moved key's delete) and the rows routed, once the
    job building ``cached`` has run its tagging tasks (each adding to accumulator ``counts``).
    ``existing == "drop"``: the rows of held keys are left out; ``"fail"``: a write holding
    stored keys is refused (10 sampled, from column ``key``)."""
    cached.count()  # builds the cache: every tagging task adds its counts
    groups: Counts = counts.value
    counts.value = {}  # PySpark's driver keeps every accumulator for good: not its counts
    if existing == "drop":
        groups = {g: c for g, c in groups.items() if g[2] is None}
    if existing == "fail":  # the counts have them: a sample is read only to name them
        duplicates = sum(rows for g, (rows, _) in groups.items() if g[2] is not None)
        if duplicates:
            held = F.col(OLD_FILE_ID).isNotNull()
            sample = cached.where(held).select(column(key)).limit(10).toArrow()
            keys = key_text(sample.column(key)).to_pylist()
            raise duplicate_keys_error(operation, duplicates, keys, table)
    inserts: dict[str, int] = {}
    touched: dict[tuple[str, str], int] = {}
    for (partition, old_partition, old_file), (rows, new) in groups.items():
        if new:
            inserts[partition] = inserts.get(partition, 0) + new
        if old_file is not None and old_partition is not None:
            group = (old_partition, old_file)
            touched[group] = touched.get(group, 0) + rows
    return inserts, touched, sum(rows for rows, _ in groups.values())
