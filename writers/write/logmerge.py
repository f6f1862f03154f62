"""The rows of a merge-on-read file slice: its base file's rows merged with its log blocks
(``index.datalog``), as a snapshot read and a compaction see them. A plain function
over pyarrow data, safe to run in Spark executors.

Rule, per key, over the base (rank 0) and the blocks in the order given (ranks 1, 2, ...; the
caller passes the visible blocks in completion order): a delete block removes every version
of its keys ranked before it; of the versions left, the one with the highest precombine value
wins, a tie going to the later rank (``ordering`` None: the latest rank wins). This is what
copy-on-write gives when the same writes rewrite the base one by one: an incoming row whose
precombine value is below the stored row's does not replace it; a delete always removes.

Order of the result: the base's rows in the base's order, each replaced in place by its
winning log version (``writers.write.inplace``; a row a delete removed, and no later version
wrote again, is left out), then the winning versions of keys the base does not hold, in the
logs' order (block by block, each block's rows by key). A base written sorted by key stays so
when only its keys were written (a compaction then has nothing to sort). No base row is
copied by a filter unless a delete removed one: key columns are kept as they are, the other
columns patched at the replaced rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.datalog import BlockType, DataLogBlock
from lakebraid.index.keys import RECORD_KEY
from lakebraid.metadata.arrow_records import bool_array, filtered, flat
from lakebraid.metadata.keymatch import locate
from lakebraid.metadata.keyorder import sort_order
from lakebraid.writers.write.datafile import cast_column, conform, stored_keys
from lakebraid.writers.write.inplace import replaced


def merge_slice(
    base: pa.Table | None,
    blocks: Sequence[DataLogBlock],
    schema: pa.Schema,
    ordering: str | None = None,
    derive_key: str | None = None,
    *,
    owned: bool = False,
) -> pa.Table:
    """The slice's rows in ``schema`` (which holds ``_braid_record_key``); see the module doc.
    ``base``: the base file's rows as stored (None: a slice of logs only), conformed to
    ``schema`` after the merge, so only its kept rows are cast (``derive_key``: as in
    ``datafile.conform``); ``ordering``: the precombine column, None for commit-time ordering;
    ``owned``: ``base`` was read for this merge alone, so its buffers may be patched in place
    (``writers.write.inplace``).

    Each log version's key is looked up in the base first (``keymatch.locate``: a search of
    the base's sorted keys, as written), which tells versions of one key apart without
    sorting the logs (:func:`_log_winners`). Base rows no log touches are kept as they are."""
    stored = base if base is not None else schema.empty_table()
    base_keys = stored_keys(stored, derive_key)
    deleted = _deleted(base_keys, blocks)
    data = [(r, b) for r, b in enumerate(blocks, 1) if b.block_type is BlockType.DATA]
    data = [(r, b) for r, b in data if b.rows.num_rows]
    if not data:
        return conform(_kept(stored, ~deleted), schema, derive_key)
    log = pa.concat_tables([conform(b.rows, schema) for _, b in data]).combine_chunks()
    ranks = np.array([r for r, _ in data], dtype=np.int64)
    rank = np.repeat(ranks, [b.rows.num_rows for _, b in data])
    log_keys = log.column(RECORD_KEY)
    removed = _removed_before(log_keys, blocks)
    at_row, held = locate(flat(base_keys), flat(log_keys))
    wins = _log_winners(at_row, held, rank, removed, log, ordering)
    won = held[wins[held]]  # winners of keys the base holds, by base row
    at = at_row[won]
    if ordering is not None and ordering in stored.column_names and len(at):
        # an older event does not replace the stored row
        older = _older(stored.column(ordering), log.column(ordering), at, won)
        older &= ~deleted[at]
        won, at = won[~older], at[~older]
    gone = deleted.copy()
    gone[at] = False  # written again after its delete: the new version takes its place
    patched = _patched(stored, base_keys, gone, at, (log, won), schema, derive_key, owned)
    fresh = np.flatnonzero(wins & (at_row < 0))
    return pa.concat_tables([patched, log.take(pa.array(fresh))]) if len(fresh) else patched


def _patched(
    stored: pa.Table,
    keys: pa.ChunkedArray,
    gone: np.ndarray,
    at: np.ndarray,
    new: tuple[pa.Table, np.ndarray],
    schema: pa.Schema,
    derive_key: str | None,
    owned: bool,
) -> pa.Table:
    """The base's rows (``stored``, its record ``keys``) in ``schema``, those ``gone`` left
    out and those ``at`` (ascending, unique) replaced by ``new``: a log (in ``schema``) and
    the indices of its rows, one per row of ``at``, in its order (``owned``: as
    :func:`merge_slice`). A replaced row keeps its key, so the record key column, and a text
    key column it is derived from, are not patched."""
    if gone.any():
        keep = ~gone
        stored, keys = filtered(stored, keep), keys.filter(bool_array(keep))
        at, owned = (np.cumsum(keep) - 1)[at], True  # filtered: new buffers
    same = {RECORD_KEY} | ({derive_key} if derive_key is not None else set())
    columns = []
    for field in schema:
        if field.name == RECORD_KEY and derive_key is not None:
            columns.append(keys)
            continue
        if field.name in stored.column_names:
            column = stored.column(field.name)
        else:
            column = pa.chunked_array([pa.nulls(stored.num_rows, field.type)], field.type)
        if field.name in same and field.type == pa.string():  # equal in both versions
            columns.append(cast_column(column, field.type))
        else:
            values = flat(new[0].column(field.name))
            columns.append(replaced(column, at, values, field.type, owned=owned, picks=new[1]))
    return pa.Table.from_arrays(columns, schema=schema)


def _older(
    stored: pa.ChunkedArray, log: pa.ChunkedArray, at: np.ndarray, won: np.ndarray
) -> np.ndarray:
    """Per winning log version (``won``: rows of the log's precombine column ``log``, in the
    read schema): whether the base row it replaces (``at``: rows of the base's column
    ``stored``) holds a greater value; a null on either side is not greater. Numbers of one
    type without nulls are compared by numpy (NaN is greater than nothing, as in Arrow)."""
    if stored.type == log.type and stored.num_chunks == 1 == log.num_chunks:
        base, new = stored.chunk(0), log.chunk(0)
        numeric = pa.types.is_integer(log.type) or pa.types.is_floating(log.type)
        if numeric and not base.null_count and not new.null_count:
            return base.to_numpy()[at] > new.to_numpy()[won]
    old = stored.take(pa.array(at)).cast(log.type)
    new_values = log.take(pa.array(won))
    return pc.fill_null(pc.greater(old, new_values), False).to_numpy(zero_copy_only=False)


def _log_winners(
    at_row: np.ndarray,
    held: np.ndarray,
    rank: np.ndarray,
    deleted_at: np.ndarray,
    rows: pa.Table,
    ordering: str | None,
) -> np.ndarray:
    """Per log version: whether it wins among the log versions of its key (no version wins
    for a key a later delete removed). ``at_row``: each version's base row, -1 for a key the
    base does not hold; ``held``: the versions of base keys by base row, a row's in log
    order (``keymatch.Located``). A row's versions are then neighbours: a row with one live
    version needs no comparison, the last of a row's wins on commit-time ordering, and only
    those of rows written more than once are ordered by precombine value; versions of new
    keys are sorted by key (:func:`_winners`)."""
    wins = np.zeros(len(rank), dtype=bool)
    live = held[rank[held] > deleted_at[held]]
    at = at_row[live]
    last = np.ones(len(at), dtype=bool)  # a row's last live version
    last[:-1] = at[1:] != at[:-1]
    if ordering is None:  # the latest rank wins: the log's order is the ranks'
        wins[live[last]] = True
    else:
        first = np.ones(len(at), dtype=bool)
        first[1:] = last[:-1]
        once = first & last
        wins[live[once]] = True
        again = live[~once]
        if len(again):
            wins[_last_versions(at_row[again], again, rank, rows, ordering)[1]] = True
    never = np.iinfo(np.int64).max  # versions of base keys: not new keys' versions
    keys = rows.column(RECORD_KEY)
    wins[_winners(keys, rank, np.where(at_row >= 0, never, deleted_at), rows, ordering)] = True
    return wins


def _kept(base: pa.Table, keep: np.ndarray) -> pa.Table:
    """``base`` filtered by ``keep`` (the same table, no copy, when it keeps every row)."""
    return base if keep.all() else filtered(base, keep)


def _deleted(keys: pa.ChunkedArray, blocks: Sequence[DataLogBlock]) -> np.ndarray:
    """Per base version (rank 0, before every block): whether a delete block names its key."""
    deletes = [b.keys for b in blocks if b.block_type is BlockType.DELETE and len(b.keys)]
    if not deletes or not len(keys):
        return np.zeros(len(keys), dtype=bool)
    value_set = pc.unique(pa.concat_arrays([d.cast(pa.string()) for d in deletes]))
    return pc.is_in(keys, value_set=value_set).to_numpy(zero_copy_only=False)


def _removed_before(keys: pa.ChunkedArray, blocks: Sequence[DataLogBlock]) -> np.ndarray:
    """Per version: the rank of the last delete of its key (-1: never deleted)."""
    last = np.full(len(keys), -1, dtype=np.int64)
    for r, block in enumerate(blocks, 1):
        if block.block_type is BlockType.DELETE:
            hit = pc.is_in(keys, value_set=block.keys).to_numpy(zero_copy_only=False)
            last[hit] = r
    return last


def _winners(
    keys: pa.Array,
    rank: np.ndarray,
    deleted_at: np.ndarray,
    rows: pa.Table,
    ordering: str | None,
) -> np.ndarray:
    """The row of the one version that wins per key (none for a key whose versions a later
    delete removed), in key order. The live versions are sorted by key alone
    (``keyorder.sort_order``: the blocks are sorted runs); only the keys written more than
    once are then ordered by precombine value and rank to find their winner."""
    alive = np.flatnonzero(rank > deleted_at)
    if len(alive) <= 1:
        return alive
    live = keys if len(alive) == len(keys) else keys.take(pa.array(alive))
    order = alive[sort_order(live).to_numpy()]
    ordered = keys.take(pa.array(order))
    same = pc.equal(ordered[1:], ordered[:-1]).to_numpy(zero_copy_only=False)
    if not same.any():
        return order
    first = np.concatenate([[True], ~same])  # a key's first version in key order
    group = np.cumsum(first) - 1
    sizes = np.bincount(group)
    twice = np.flatnonzero(sizes[group] > 1)  # versions of keys written more than once
    _, last = _last_versions(group[twice], order[twice], rank, rows, ordering)
    winners = order[np.flatnonzero(first)]
    winners[sizes > 1] = last
    return winners


def _last_versions(
    group: np.ndarray,
    versions: np.ndarray,
    rank: np.ndarray,
    rows: pa.Table,
    ordering: str | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct ``group`` (ascending), the one of its ``versions`` (rows of ``rows``) of
    the highest precombine value, a tie going to the latest rank (``ordering`` None: the
    latest rank); the groups and their winners."""
    columns: dict[str, pa.Array | pa.ChunkedArray | np.ndarray] = {"g": group}
    by: list[tuple[str, str]] = [("g", "ascending")]
    if ordering is not None:
        columns["o"] = rows.column(ordering).take(pa.array(versions))
        by.append(("o", "ascending"))
    columns["r"] = rank[versions]
    by.append(("r", "ascending"))
    sub = pc.sort_indices(pa.table(columns), sort_keys=by).to_numpy()
    ordered = group[sub]
    last = np.append(ordered[1:] != ordered[:-1], True)  # a group's last version
    return ordered[last], versions[sub][last]
