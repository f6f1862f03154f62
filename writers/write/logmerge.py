"""The rows of a merge-on-read file slice: its base file's rows merged with its log blocks
(``writers.write.datalog``), as a snapshot read and a compaction see them. A plain function
over pyarrow data, safe to run in Spark executors.

Rule, per key, over the base (rank 0) and the blocks in the order given (ranks 1, 2, ...; the
caller passes the visible blocks in completion order): a delete block removes every version
of its keys ranked before it; of the versions left, the one with the highest precombine value
wins, a tie going to the later rank (``ordering`` None: the latest rank wins). This is what
copy-on-write gives when the same writes rewrite the base one by one: an incoming row whose
precombine value is below the stored row's does not replace it; a delete always removes.

How: every key a block names gets a slot, an integer: the key's row in the base when the base
holds it, else one past the base's rows in key order. A block written against this very base
names those rows itself (``_braid_base_row``); they are checked against the base's keys at
those rows, and a block written against another base (a compaction replaced it) or whose rows
do not check is matched by key (``keyorder.KeyPositions``). The rest is integer work: the last
delete of each slot, the versions after it, the winner per slot.

Order of the result: the base's rows that no log version replaced, in the base's order, then
the logs' winning versions: those of keys the base holds in the base's order, then those of
new keys sorted by key. So the base's rows are copied once, by one filter (none when the logs
replaced or deleted none of them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.keyorder import KeyPositions, sort_order
from lakebraid.writers.write.datafile import conform, stored_keys
from lakebraid.writers.write.datalog import BlockType, DataLogBlock


def merge_slice(
    base: pa.Table | None,
    blocks: Sequence[DataLogBlock],
    schema: pa.Schema,
    ordering: str | None = None,
    derive_key: str | None = None,
    base_file: str | None = None,
) -> pa.Table:
    """The slice's rows in ``schema`` (which holds ``_braid_record_key``); see the module doc.
    ``base``: the base file's rows as stored (None: a slice of logs only), conformed to
    ``schema`` after the merge, so only its kept rows are cast (``derive_key``: as in
    ``datafile.conform``); ``ordering``: the precombine column, None for commit-time ordering;
    ``base_file``: the base's file name when ``base`` holds all its rows in order (blocks
    written against it then give their keys' rows; None: every key is matched)."""
    stored = base if base is not None else schema.empty_table()
    n = stored.num_rows
    slots = _slots(stored, blocks, derive_key, base_file)
    last_delete = np.full(n + int(max((s.max(initial=-1) for s in slots), default=-1)) + 1, -1)
    for r, (block, slot) in enumerate(zip(blocks, slots, strict=True), 1):
        if block.block_type is BlockType.DELETE:
            last_delete[slot] = r
    keep = last_delete[:n] < 0  # not deleted
    data = [
        (r, b, s) for r, (b, s) in enumerate(zip(blocks, slots, strict=True), 1) if _has_rows(b)
    ]
    if not data:
        return conform(_kept(stored, keep), schema, derive_key)
    log = pa.concat_tables([conform(b.rows, schema) for _, b, _ in data]).combine_chunks()
    rank = np.repeat([r for r, _, _ in data], [b.rows.num_rows for _, b, _ in data])
    slot = np.concatenate([s for _, _, s in data])
    won = _winners(slot, rank, rank > last_delete[slot], log, ordering)
    at = slot[won]
    at = at[at < n]  # winners of keys the base holds: in base order, first
    keep[at] = False
    if ordering is not None and ordering in stored.column_names and len(at):
        # an older event does not replace the stored row
        old = stored.column(ordering).take(pa.array(at)).cast(schema.field(ordering).type)
        new = log.column(ordering).take(pa.array(won[: len(at)]))
        older = pc.fill_null(pc.greater(old, new), False).to_numpy(zero_copy_only=False)
        older &= last_delete[at] < 0
        keep[at[older]] = True
        won = np.delete(won, np.flatnonzero(older))
    kept = conform(_kept(stored, keep), schema, derive_key)
    return pa.concat_tables([kept, log.take(pa.array(won, pa.int64()))])


def _has_rows(block: DataLogBlock) -> bool:
    return block.block_type is BlockType.DATA and block.rows.num_rows > 0


def _kept(base: pa.Table, keep: np.ndarray) -> pa.Table:
    """``base`` filtered by ``keep`` (the same table, no copy, when it keeps every row)."""
    return base if keep.all() else base.filter(pa.array(keep))


def _slots(
    stored: pa.Table, blocks: Sequence[DataLogBlock], derive_key: str | None, base_file: str | None
) -> list[np.ndarray]:
    """Per block, the slot of each of its keys (see the module doc)."""
    n = stored.num_rows
    rows: list[np.ndarray | None] = [None] * len(blocks)
    named = [i for i, b in enumerate(blocks) if _names(b, base_file)]
    found = [_rows(blocks[i]) for i in named]
    if named and _hold(stored, derive_key, [blocks[i].keys for i in named], found):
        for i, at in zip(named, found, strict=True):
            rows[i] = at
    unnamed = [i for i, r in enumerate(rows) if r is None]  # (all, if a named row was wrong)
    if unnamed:
        positions = KeyPositions(flat(stored_keys(stored, derive_key)))
        matched = positions.rows_of([blocks[i].keys for i in unnamed])
        for i, at in zip(unnamed, matched, strict=True):
            rows[i] = at
    held = [r for r in rows if r is not None]
    new = [np.flatnonzero(r < 0) for r in held]  # the keys the base does not hold
    if any(len(x) for x in new):
        keys = pa.concat_arrays(
            [b.keys.take(pa.array(x)) for b, x in zip(blocks, new, strict=True)]
        )
        order = sort_order(keys).to_numpy()
        ordered = keys.take(pa.array(order))
        first = np.ones(len(keys), dtype=bool)
        first[1:] = pc.not_equal(ordered[1:], ordered[:-1]).to_numpy(zero_copy_only=False)
        dense = np.empty(len(keys), np.int64)
        dense[order] = np.cumsum(first) - 1
        for r, x, ids in zip(
            held, new, np.split(dense, np.cumsum([len(x) for x in new])[:-1]), strict=True
        ):
            r[x] = n + ids
    return held


def _names(block: DataLogBlock, base_file: str | None) -> bool:
    """Whether ``block`` names its keys' rows in the base file ``base_file``."""
    return (
        block.base_rows is not None
        and base_file is not None
        and (block.header.base_file == base_file)
    )


def _rows(block: DataLogBlock) -> np.ndarray:
    """A block's named base rows as int64, -1 for null (the base holds not the key)."""
    named = pc.fill_null(block.base_rows, -1)
    return named.to_numpy(zero_copy_only=False).astype(np.int64)


def _hold(
    stored: pa.Table, derive_key: str | None, keys: list[pa.Array], rows: list[np.ndarray]
) -> bool:
    """Whether the base holds every named key at its named row (one take for all blocks)."""
    at = np.concatenate(rows)
    held = at >= 0
    if not held.any():
        return True
    if at.max() >= stored.num_rows:
        return False
    ours = pa.concat_arrays(keys)
    if not held.all():
        ours, at = ours.filter(pa.array(held)), at[held]
    theirs = flat(stored.column(derive_key or RECORD_KEY)).take(pa.array(at))
    return bool(pc.all(pc.equal(pc.cast(theirs, pa.string()), ours)).as_py())


def _winners(
    slot: np.ndarray, rank: np.ndarray, alive: np.ndarray, rows: pa.Table, ordering: str | None
) -> np.ndarray:
    """The row of the one version that wins per slot among the ``alive`` ones (those no later
    delete removed), in slot order. The versions are sorted by slot (stable: the blocks'
    rows come in rank order); only the slots written more than once are then ordered by
    precombine value and rank to find their winner."""
    live = np.flatnonzero(alive)
    order = live[np.argsort(slot[live], kind="stable")]
    ordered = slot[order]
    same = ordered[1:] == ordered[:-1]
    if not same.any():
        return order
    first = np.concatenate([[True], ~same])  # a slot's first version
    group = np.cumsum(first) - 1
    sizes = np.bincount(group)
    if ordering is None:  # the latest rank wins: the last in stable order
        return order[np.append(np.flatnonzero(first)[1:] - 1, len(order) - 1)]
    twice = np.flatnonzero(sizes[group] > 1)  # versions of slots written more than once
    rows_twice, group_twice = order[twice], group[twice]
    columns = {"g": group_twice, "o": rows.column(ordering).take(pa.array(rows_twice))}
    columns["r"] = rank[rows_twice]
    by = [("g", "ascending"), ("o", "ascending"), ("r", "ascending")]
    sub = pc.sort_indices(pa.table(columns), sort_keys=by).to_numpy()
    last = np.append(group_twice[sub][1:] != group_twice[sub][:-1], True)  # a slot's last
    winners = order[np.flatnonzero(first)]
    winners[sizes > 1] = rows_twice[sub][last]
    return winners
