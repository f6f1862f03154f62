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
    column, None for commit-time ordering."""
    sources = [base if base is not None else schema.empty_table()]
    sources += [b.rows for b in blocks if b.block_type is BlockType.DATA]
    data_ranks = [0] + [r for r, b in enumerate(blocks, 1) if b.block_type is BlockType.DATA]
    conformed = [_conformed(t, schema) for t in sources]
    rows = pa.concat_tables(conformed) if conformed else schema.empty_table()
    rank = np.repeat(np.array(data_ranks, dtype=np.int64), [t.num_rows for t in conformed])
    keys = rows.column(RECORD_KEY)
    winner = _winners(keys, rank, _removed_before(keys, blocks), rows, ordering)
    n_base = conformed[0].num_rows
    chosen = np.flatnonzero(winner)
    in_base = _base_slot(keys, n_base, chosen)
    old = chosen[in_base >= 0]
    old = old[np.argsort(in_base[in_base >= 0], kind="stable")]
    new = chosen[in_base < 0]
    if len(new) > 1:
        new = new[pc.sort_indices(keys.take(pa.array(new))).to_numpy()]
    return rows.take(pa.array(np.concatenate([old, new]), pa.int64()))


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``: a column it lacks (older schema) becomes nulls."""
    columns = [
        table.column(f.name).cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


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


def _base_slot(keys: pa.ChunkedArray, n_base: int, chosen: np.ndarray) -> np.ndarray:
    """For each chosen version, the base row of its key (-1: the base does not hold it)."""
    if n_base == 0 or len(chosen) == 0:
        return np.full(len(chosen), -1, dtype=np.int64)
    base_keys = keys.slice(0, n_base)
    found = pc.index_in(keys.take(pa.array(chosen)), value_set=base_keys.combine_chunks())
    return pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
