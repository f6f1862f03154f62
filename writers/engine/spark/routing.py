"""Routing in Spark SQL for the Spark engine's write pipeline
(``writers.engine.spark.pipeline``): each row's target file group, computed by the JVM
without a pass through Python; the integer keys that give each file group its own task in
the rewrite's shuffle, and how the file groups are dealt to those tasks.

**Dealing.** A rewrite task's time is about its groups' stored rows (read, merged, written
again) plus :data:`INCOMING_COST` times their incoming rows (each also crosses from the JVM),
plus :data:`FILE_COST` per file written. The groups, costliest first, each go to the task of
least cost so far, so the tasks end together: a 1M-row upsert into 10M rows rewrites 30 groups
of 333k stored rows and writes 30 new ones of 17k inserts; dealt in turn, two cores waited
0.3-0.4 s for the last tasks' heavy groups, dealt by cost the rewrite stage's eight tasks kept
both cores busy to its end."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.writers.read.columns import column
from lakebraid.writers.write.filegroup import OP, OP_DELETE, OP_UPSERT
from lakebraid.writers.write.route import KEY_HASH, PARTITION, TARGET_FILE_ID
from lakebraid.writers.write.slots import Slot

__all__ = [
    "KEY_HASH",
    "deal",
    "rewrite_costs",
    "rewrite_tasks",
    "route_rows",
    "task_keys",
    "unsigned_mod",
]
_TASK_KEYS: dict[int, list[int]] = {}  # task_keys by task count, for this process
# a rewrite task's cost per incoming row and per file, in stored rows: fitted to the tasks of
# a 1M-row upsert into 10M rows (4 groups of 333k stored + 17k incoming rows: 0.67 s; 3 such
# and 11 new groups of 17k: 0.78 s)
INCOMING_COST = 4
FILE_COST = 10_000
Group = tuple[str, str]  # (partition, file id)
# a rewrite task costs Spark's own work (its shuffle fetch, a Python worker's round trip, the
# wait for its last row before the rewrite starts), so the groups are dealt by their
# estimated cost (:func:`deal`) to one task per core (1M-row upsert into 60 groups on
# local[2], the counts alternated in one session, medians of 6-7 warm runs: one task per core
# 3.96-3.98 s, two 4.13 s, four 4.31-4.42 s; a task per group was slower still)
REWRITE_TASKS_PER_CORE = 1
# ... unless the groups bring this many rows each on average (a bulk insert): their tasks are
# long beside Spark's cost, and a task per group overlaps one task's transfer from the JVM
# with another's Python work (10M rows in 60 groups: 59-71 s a task per group, 63-75 dealt)
ALONE_ROWS = 50_000
# ... and a task receives at most about this many rows on average: it holds them all, and a
# base file at a time, while it writes (the 1M-row upsert's two tasks of 500k rows peaked at
# ~590 MiB per Python worker), so a large write of many small groups takes more tasks than the
# cores. (The one-pass tagging tasks, one per core, still hold 1/cores of the input each:
# their count is fixed before the input is counted.)
TASK_ROWS = 1_000_000


def route_rows(tagged: DataFrame, plan: Mapping[str, list[Slot]]) -> DataFrame:
    """``writers.write.route.route`` in Spark SQL, row for row: a row whose key the partition
    holds goes to its file group; a new one (or one moving in) to the slot of its partition
    whose hash range (:func:`slot_ranges`) holds ``key hash % the partition's slot rows``
    (the format's key hash as an unsigned 64-bit number: its remainder from that of its top
    63 bits, in long arithmetic, exact for any slot rows below 2**62); a move also leaves a
    delete row for its old group (a second copy of the row, by ``explode``: one pass over
    ``tagged``). A new row of a partition without slots keeps no target, which the rewrite
    refuses."""
    bucket = unsigned_mod(F.col(KEY_HASH), F.col("_slot_total"))
    new = (F.col(OP) == OP_UPSERT) & (
        F.col(OLD_PARTITION).isNull() | (F.col(OLD_PARTITION) != F.col(PARTITION))
    )
    in_range = (bucket >= F.col("_slot_low")) & (bucket < F.col("_slot_high"))
    slots = F.broadcast(slot_ranges(tagged.sparkSession, plan))
    joined = tagged.join(
        slots, (F.col(PARTITION) == F.col("_slot_partition")) & new & in_range, "left"
    )
    absent = (F.col(OP) == OP_DELETE) & F.col(OLD_FILE_ID).isNull()  # a delete of no key
    moves = new & F.col(OLD_FILE_ID).isNotNull()
    copies = F.when(moves, F.array(F.lit(0), F.lit(1))).otherwise(F.array(F.lit(0)))
    rows = joined.where(~absent).select(
        *tagged.columns,
        F.when(new, F.col("_slot")).otherwise(F.col(OLD_FILE_ID)).alias(TARGET_FILE_ID),
        F.explode(copies).alias("_copy"),
    )
    leaving = F.col("_copy") == 1  # the move's delete row, for its old group
    delete = F.lit(OP_DELETE).cast("tinyint")
    swapped = {
        OP: F.when(leaving, delete).otherwise(F.col(OP)),
        PARTITION: F.when(leaving, F.col(OLD_PARTITION)).otherwise(F.col(PARTITION)),
        TARGET_FILE_ID: F.when(leaving, F.col(OLD_FILE_ID)).otherwise(F.col(TARGET_FILE_ID)),
    }
    return rows.select(
        *[swapped.get(c, column(c)).alias(c) for c in [*tagged.columns, TARGET_FILE_ID]]
    )


def unsigned_mod(bits: Column, total: Column) -> Column:
    """``bits`` (a long) read as an unsigned 64-bit number, modulo ``total`` (a long from 1 to
    2**62), in long arithmetic: u % t = (2 * ((u >>> 1) % t) + (u & 1)) % t, every step below
    2**63 (no overflow, so ANSI mode has nothing to refuse)."""
    half = F.shiftrightunsigned(bits, 1) % total
    return (half * 2 + bits.bitwiseAND(1)) % total


def slot_ranges(spark: Any, plan: Mapping[str, list[Slot]]) -> DataFrame:
    """Per insert slot: its partition, its hash range [low, high) and the partition's slot
    rows (``total``, at least 1), as ``route._choose_slots`` picks slots; the last slot's
    range runs to ``total``, past every remainder."""
    rows = []
    for partition, slots in plan.items():
        total, low = sum(s.rows for s in slots), 0
        for i, slot in enumerate(slots):
            high = max(total, 1) if i == len(slots) - 1 else low + slot.rows
            rows.append([partition, low, high, max(total, 1), slot.file_id])
            low += slot.rows
    names = ["_slot_partition", "_slot_low", "_slot_high", "_slot_total", "_slot"]
    kinds = [pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.string()]
    columns = list(zip(*rows, strict=True)) if rows else [[]] * 5
    table = pa.table([pa.array(c, k) for c, k in zip(columns, kinds, strict=True)], names=names)
    return spark.createDataFrame(table)


def task_keys(spark: Any, n: int) -> list[int]:
    """``n`` integers that Spark's hash partitioning into ``n`` partitions sends to
    partitions 0 .. n-1, one each (found by Spark's own ``pmod(hash(k), n)`` over a range
    of candidates, so no two file groups share a task by a hash collision); past the range,
    the remaining groups take any integer (they share tasks, which is still correct)."""
    if n not in _TASK_KEYS:  # Spark's hash does not change: one small job per count
        spread = F.pmod(F.hash(F.col("id")), F.lit(n)).alias("slot")
        found: dict[int, int] = {}
        for row in spark.range(0, 20 * n + 64).select("id", spread).collect():
            found.setdefault(int(row["slot"]), int(row["id"]))
        _TASK_KEYS[n] = [found.get(i, i) for i in range(n)]
    return _TASK_KEYS[n]


def rewrite_costs(
    touched: Mapping[Group, int],
    plan: Mapping[str, list[Slot]],
    inserts: Mapping[str, int],
    stored: Mapping[Group, int],
) -> dict[Group, float]:
    """The estimated cost of rewriting each group (see the module doc): ``touched``'s
    incoming rows of existing groups, each partition's ``inserts`` shared by its ``plan``
    slots in proportion to their room (as the key hash spreads them), and ``stored``: the
    rows of the groups' current base files (a group not listed: none)."""
    incoming = {group: float(rows) for group, rows in touched.items()}
    for partition, slots in plan.items():
        room = sum(s.rows for s in slots)
        for slot in slots:
            share = inserts.get(partition, 0) * slot.rows / room if room else 0.0
            group = (partition, slot.file_id)
            incoming[group] = incoming.get(group, 0.0) + share
    return {
        group: stored.get(group, 0) + INCOMING_COST * rows + FILE_COST
        for group, rows in incoming.items()
    }


def deal(costs: list[float], tasks: int) -> list[int]:
    """The task (0 .. ``tasks`` - 1) of each group of ``costs``: costliest first, each to the
    task of least cost so far (the lowest such task on a tie)."""
    loads = [(0.0, task) for task in range(tasks)]
    heapq.heapify(loads)
    dealt = [0] * len(costs)
    for group in sorted(range(len(costs)), key=lambda g: (-costs[g], g)):
        load, task = heapq.heappop(loads)
        dealt[group] = task
        heapq.heappush(loads, (load + costs[group], task))
    return dealt


def rewrite_tasks(spark: Any, groups: int, rows: int = 0) -> int:
    """How many Spark tasks rewrite ``groups`` file groups receiving ``rows`` rows: one per
    group up to ``REWRITE_TASKS_PER_CORE`` per core of the session or one per
    ``TASK_ROWS`` rows, whichever is more, or one per group when they receive
    ``ALONE_ROWS`` rows each on average."""
    if rows >= ALONE_ROWS * groups:
        return max(1, groups)
    cores = max(1, spark.sparkContext.defaultParallelism)
    by_rows = -(-rows // TASK_ROWS)  # rounded up
    return max(1, min(groups, max(REWRITE_TASKS_PER_CORE * cores, by_rows)))
