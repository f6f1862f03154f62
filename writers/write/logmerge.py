"""The rows of a merge-on-read file slice: its base file's rows merged with its log blocks
(``writers.write.datalog``), as a snapshot read and a compaction see them. A plain function
over pyarrow data, safe to run in Spark executors.

Rule, per key, over the base (rank 0) and the blocks in the order given (ranks 1, 2, ...; the
caller passes the visible blocks in completion order): a delete block removes every version
of its keys ranked before it; of the versions left, the one with the highest precombine value
wins, a tie going to the later rank (``ordering`` None: the latest rank wins). This is what
copy-on-write gives when the same writes rewrite the base one by one: an incoming row whose
precombine value is below the stored row's does not replace it; a delete always removes.

Order of the result: the rows of keys the base holds, in the base's order (an updated row
takes its old place), then keys the base does not hold, sorted by key.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.keys import RECORD_KEY
from lakebraid.writers.write.datalog import BlockType, DataLogBlock


def merge_slice(
    base: pa.Table | None,
    blocks: Sequence[DataLogBlock],
    schema: pa.Schema,
    ordering: str | None = None,
) -> pa.Table:
    """The slice's rows in ``schema`` (which holds ``_braid_record_key``); see the module doc.
    ``base``: the base file's rows (None: a slice of logs only); ``ordering``: the precombine
    column, None for commit-time ordering.

    Only the logs' versions are sorted (a log holds few rows beside its base): their winner
    per key is found first, then each base row is matched with its key's winner by a hash
    lookup; base rows no log touches are kept as they are."""
    base = _conformed(base if base is not None else schema.empty_table(), schema)
    data = [b for b in blocks if b.block_type is BlockType.DATA]
    log = pa.concat_tables([_conformed(b.rows, schema) for b in data]) if data else None
    if log is None or log.num_rows == 0:
        return base.filter(pc.invert(_deleted(base.column(RECORD_KEY), blocks)))
    ranks = [r for r, b in enumerate(blocks, 1) if b.block_type is BlockType.DATA]
    rank = np.repeat(np.array(ranks, dtype=np.int64), [b.rows.num_rows for b in data])
    log_keys = log.column(RECORD_KEY)
    won = np.flatnonzero(_winners(log_keys, rank, _removed_before(log_keys, blocks), log, ordering))
    won_keys = log_keys.take(pa.array(won)).combine_chunks()
    base_keys = base.column(RECORD_KEY)
    match = pc.index_in(base_keys, value_set=won_keys)  # per base row: its key's log winner
    has_log = pc.is_valid(match).to_numpy(zero_copy_only=False)
    slot = pc.fill_null(match, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    alive = ~_deleted(base_keys, blocks).to_numpy(zero_copy_only=False)
    base_wins = np.zeros(len(slot), dtype=bool)
    if ordering is not None and has_log.any():  # an older event does not replace the stored
        stored = base.column(ordering).take(pa.array(np.flatnonzero(has_log)))
        incoming = log.column(ordering).take(pa.array(won[slot[has_log]]))
        base_wins[has_log] = pc.greater(stored, incoming).to_numpy(zero_copy_only=False)
    base_wins &= alive
    n_base = base.num_rows
    # each base row's place: itself, its key's log winner, or nothing (deleted)
    place = np.where(base_wins | (alive & ~has_log), np.arange(n_base), -1)
    replaced = has_log & ~base_wins
    place[replaced] = n_base + won[slot[replaced]]
    held = np.zeros(len(won), dtype=bool)
    held[slot[has_log]] = True
    new = won[~held]
    if len(new) > 1:
        new = new[pc.sort_indices(log_keys.take(pa.array(new))).to_numpy()]
    order = np.concatenate([place[place >= 0], n_base + new])
    # one contiguous table first: a take across chunks resolves each row's chunk (slow)
    both = pa.concat_tables([base, log]).combine_chunks()
    return both.take(pa.array(order, pa.int64()))


def _deleted(keys: pa.ChunkedArray, blocks: Sequence[DataLogBlock]) -> pa.Array:
    """Per base version (rank 0, before every block): whether a delete block names its key."""
    deletes = [b.keys for b in blocks if b.block_type is BlockType.DELETE and len(b.keys)]
    if not deletes:
        return pa.array(np.zeros(len(keys), dtype=bool))
    value_set = pc.unique(pa.concat_arrays([d.cast(pa.string()) for d in deletes]))
    return (
        pc.is_in(keys, value_set=value_set).combine_chunks()
        if len(keys)
        else pa.array([], pa.bool_())
    )


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``: a column it lacks (older schema) becomes nulls."""
    if table.schema.equals(schema):
        return table
    columns = [
        _cast(table.column(f.name), f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _cast(column: pa.ChunkedArray, kind: pa.DataType) -> pa.ChunkedArray:
    return column if column.type == kind else column.cast(kind)


def _removed_before(keys: pa.ChunkedArray, blocks: Sequence[DataLogBlock]) -> np.ndarray:
    """Per version: the rank of the last delete of its key (-1: never deleted)."""
    last = np.full(len(keys), -1, dtype=np.int64)
    for r, block in enumerate(blocks, 1):
        if block.block_type is BlockType.DELETE:
            hit = pc.is_in(keys, value_set=block.keys).to_numpy(zero_copy_only=False)
            last[hit] = r
    return last


def _winners(
    keys: pa.ChunkedArray,
    rank: np.ndarray,
    deleted_at: np.ndarray,
    rows: pa.Table,
    ordering: str | None,
) -> np.ndarray:
    """A mask of the one version that wins per key (none when a later delete removed all)."""
    alive = rank > deleted_at
    n = len(keys)
    if n == 0:
        return alive
    by: list[tuple[str, str]] = [("k", "ascending")]
    columns: dict[str, pa.Array | pa.ChunkedArray | np.ndarray] = {"k": keys}
    if ordering is not None:
        columns["o"] = rows.column(ordering)
        by.append(("o", "ascending"))
    columns["r"] = rank
    by.append(("r", "ascending"))
    order = pc.sort_indices(pa.table(columns), sort_keys=by).to_numpy()
    order = order[alive[order]]
    if len(order) == 0:
        return np.zeros(n, dtype=bool)
    sorted_keys = keys.take(pa.array(order))
    last = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        same = pc.equal(sorted_keys[:-1], sorted_keys[1:]).to_numpy(zero_copy_only=False)
        last[:-1] = ~same
    winner = np.zeros(n, dtype=bool)
    winner[order[last]] = True
    return winner
