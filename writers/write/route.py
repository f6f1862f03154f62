"""The steps of a write as plain functions over pyarrow tables (both engines run these).

prepare (record key + partition path columns) -> deduplicate (highest precombine wins) ->
tag (current location from the record index) -> route (target file group of every row;
a key that changes partition becomes a delete in its old group plus an insert) -> rewrite
(``writers.write.filegroup``). Planning the insert slots of each partition needs global
counts, so it runs on the driver (:func:`plan_slots`) between tagging and routing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.index.keys import RECORD_KEY, key_text
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.index.scope import index_keys
from lakebraid.metadata.arrow_records import first_per_key, flat
from lakebraid.metadata.hashing import shared_hashes, stable_hashes
from lakebraid.metadata.keyorder import strictly_ascending
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.errors import InputError
from lakebraid.writers.write.datafile import read_parquet
from lakebraid.writers.write.filegroup import OP, OP_DELETE, OP_UPSERT, RewriteTask
from lakebraid.writers.write.partition_codes import codes, counted_values, encode_partitions
from lakebraid.writers.write.slots import Slot, by_hash, one_slot_targets

PARTITION = "_braid_partition"
TARGET_FILE_ID = "_braid_target_file_id"
SEQ = "_braid_seq"
SEQ_KEY = "_braid_seq_key"  # the index key of rows being de-duplicated
KEY_HASH = "_braid_key_hash"  # metadata.hashing.stable_hashes of the record key, int64 bits
WORK_COLUMNS = (PARTITION, OLD_PARTITION, OLD_FILE_ID, TARGET_FILE_ID, SEQ, KEY_HASH)


def prepare(
    table: pa.Table, key: str, partition_fields: Sequence[str], *, coded: bool = False
) -> pa.Table:
    """Add the record-key (its canonical text, ``index.keys``) and partition-path columns.
    ``coded``: the partition fields of type string become the dictionary columns their
    paths were built from (the same values): a write then takes and stores int32 indices,
    as its files hold them (``filegroup.schemas``), not a string per row."""
    keys = key_text(table.column(key))
    table = table.append_column(RECORD_KEY, keys)
    paths, fields = encode_partitions(table, partition_fields)
    if coded:
        for name, column in fields.items():
            table = table.set_column(table.schema.get_field_index(name), name, column)
    return table.append_column(PARTITION, paths)


def with_key_hashes(table: pa.Table) -> pa.Table:
    """Prepared rows with :data:`KEY_HASH`: the record key hashed once for the write's steps
    (de-duplication, the record-index lookup, insert routing; :func:`key_hashes`)."""
    hashes = stable_hashes(table.column(RECORD_KEY)).view(np.int64)
    return table.append_column(pa.field(KEY_HASH, pa.int64()), pa.array(hashes))


def key_hashes(table: pa.Table, scoped: bool = False) -> np.ndarray | None:
    """The format hash (uint64) of each row's index key, from :data:`KEY_HASH` (None when the
    rows lack it, or the index is partition-scoped: its keys are not the record keys)."""
    if scoped or KEY_HASH not in table.column_names:
        return None
    return flat(table.column(KEY_HASH)).to_numpy().view(np.uint64)


def row_index_keys(table: pa.Table, scoped: bool) -> pa.Array:
    """The record-index key of every prepared row (``index.scope``): its record key, or
    (partition-scoped) its partition path and record key."""
    return index_keys(table.column(RECORD_KEY), table.column(PARTITION) if scoped else None)


def deduplicate(table: pa.Table, precombine: str | None, scoped: bool = False) -> pa.Table:
    """One row per index key (the record key; ``scoped``: per partition and record key): the
    highest precombine value wins, then the latest row.

    Rows whose record keys strictly ascend (``keyorder.strictly_ascending``: a load of sorted
    ids) hold no key twice and are kept as they are. Otherwise keys are compared by their
    64-bit format hash first (a numeric sort, no string sort): rows whose hash is unique in
    the batch are unique; only the rows that share a hash (true duplicates, or a rare
    collision) go through the exact sort by key."""
    if not scoped and strictly_ascending(table.column(RECORD_KEY)):
        return table  # rows in key order, no key twice (a load of sorted ids)
    hashes = key_hashes(table, scoped)
    if hashes is None:
        hashes = stable_hashes(row_index_keys(table, scoped))
    marked = shared_hashes(hashes)
    if marked is None:
        return table
    shared = pa.array(marked)
    exact = table.filter(shared)
    exact = exact.append_column(SEQ_KEY, row_index_keys(exact, scoped))
    return pa.concat_tables(
        [table.filter(pc.invert(shared)), _deduplicate_exact(exact, precombine)]
    )


def _deduplicate_exact(table: pa.Table, precombine: str | None) -> pa.Table:
    table = table.append_column(SEQ, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    order = [(precombine, "descending")] if precombine is not None else []
    first = first_per_key(table, SEQ_KEY, [*order, (SEQ, "descending")])
    return first.drop_columns([SEQ, SEQ_KEY])


def insert_counts(tagged: pa.Table, new: pa.BooleanArray) -> dict[str, int]:
    """New rows per partition (``new``: :func:`new_in_partition`): keys not in the index, or
    moving in from another partition."""
    return counted_values(_rows_where(tagged.column(PARTITION), new))


def _rows_where(rows: pa.Table | pa.ChunkedArray, mask: pa.BooleanArray) -> Any:
    """``rows`` filtered by ``mask``; ``rows`` themselves when it keeps every one (a first
    load's inserts: no filtered copy)."""
    return rows if mask.true_count == len(mask) else rows.filter(mask)


def new_in_partition(tagged: pa.Table) -> pa.BooleanArray:
    """Upserts of keys the partition does not hold yet (absent, or moving in). When no row
    has an old partition (a first load, keys all new) that is every upsert, found without
    encoding the partitions."""
    upsert = tagged.column(OP).to_numpy() == OP_UPSERT
    held = tagged.column(OLD_PARTITION)
    if held.null_count == len(held):
        return pa.array(upsert)
    old, now = codes([held, tagged.column(PARTITION)])[0]
    return pa.array(upsert & (old != now))


def route(tagged: pa.Table, plan: Mapping[str, Sequence[Slot]], new: pa.BooleanArray) -> pa.Table:
    """Give every row its target file group; moved keys also yield a delete row for their
    old group. Inserts are spread over the partition's slots in proportion to their room by
    the format's key hash, so every engine routes the same key to the same slot. ``new``:
    :func:`new_in_partition` of ``tagged``."""
    targets = one_slot_targets(tagged.column(PARTITION), plan, new)
    if targets is None:
        (old_ids,), known = codes([tagged.column(OLD_FILE_ID)])
        carried = [c for c in (RECORD_KEY, PARTITION, KEY_HASH) if c in tagged.column_names]
        inserts = _rows_where(tagged.select(carried), new)
        slots, names = _choose_slots(inserts, plan)
        picked = old_ids.copy()  # -1 where the key has no old group
        picked[new.to_numpy(zero_copy_only=False)] = len(known) + slots
        targets = pa.DictionaryArray.from_arrays(
            pa.array(picked, mask=picked < 0), pa.concat_arrays([known, names])
        )
    routed = tagged.append_column(TARGET_FILE_ID, targets)
    old = tagged.column(OLD_FILE_ID)
    held = old.null_count < len(old)  # else every key is new (a first write): none moves
    leaving = tagged.filter(pc.and_(new, pc.is_valid(old))) if held else tagged.slice(0, 0)
    if leaving.num_rows:
        deletes = leaving.set_column(
            leaving.schema.get_field_index(OP),
            OP,
            pa.repeat(pa.scalar(OP_DELETE, pa.int8()), leaving.num_rows),
        )
        deletes = deletes.set_column(
            deletes.schema.get_field_index(PARTITION),
            PARTITION,
            deletes.column(OLD_PARTITION).cast(routed.schema.field(PARTITION).type),
        )
        deletes = deletes.append_column(
            TARGET_FILE_ID, leaving.column(OLD_FILE_ID).cast(targets.type)
        )
        routed = pa.concat_tables([routed, deletes])
    if not routed.column(TARGET_FILE_ID).null_count:
        return routed  # every row has a target: no delete of a key the table lacks
    unknown = pc.and_(
        pc.equal(routed.column(OP), OP_DELETE), pc.is_null(routed.column(TARGET_FILE_ID))
    )
    if not pc.any(unknown).as_py():
        return routed
    return routed.filter(pc.invert(unknown))  # deletes of keys the table does not hold


def _choose_slots(
    inserts: pa.Table, plan: Mapping[str, Sequence[Slot]]
) -> tuple[np.ndarray, pa.Array]:
    """The slot of every insert (an index into the returned file ids)."""
    names: list[str] = []
    chosen = np.empty(inserts.num_rows, dtype=np.int32)
    if not inserts.num_rows:
        return chosen, pa.array(names, pa.string())
    (parts,), partitions = codes([inserts.column(PARTITION)])
    present = np.flatnonzero(np.bincount(parts, minlength=len(partitions)))
    text = partitions.to_pylist()
    plans = {int(c): plan[text[c]] for c in present}  # the dictionary may hold more values
    if all(len(slots) == 1 for slots in plans.values()):  # one slot each: no hash needed
        slot_of = np.zeros(len(partitions), dtype=np.int32)
        slot_of[present] = np.arange(len(present), dtype=np.int32)
        chosen[:] = slot_of[parts]
        names.extend(plans[int(c)][0].file_id for c in present)
        return chosen, pa.array(names, pa.string())
    hashes = key_hashes(inserts)
    if hashes is None:
        hashes = stable_hashes(inserts.column(RECORD_KEY))
    return by_hash(parts, hashes, [(int(c), plans[int(c)]) for c in present], names)


def key_copies(rows: pa.Table, record_key: str, virtual: bool) -> tuple[str, ...]:
    """The columns of prepared ``rows`` holding the very values of ``RECORD_KEY``: a virtual
    key's own column when it is text (its key text is itself, ``index.keys.key_text``)."""
    if not virtual or record_key not in rows.column_names or RECORD_KEY not in rows.column_names:
        return ()
    return (record_key,) if rows.schema.field(record_key).type == pa.string() else ()


def plain(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary-typed work columns decoded to strings (what Spark's
    declared schemas say)."""
    for name in (PARTITION, OLD_PARTITION, OLD_FILE_ID, TARGET_FILE_ID):
        if name in table.column_names and pa.types.is_dictionary(table.schema.field(name).type):
            at = table.schema.get_field_index(name)
            table = table.set_column(at, name, table.column(name).cast(pa.string()))
    return table


def rewrite_tasks(
    targets: Sequence[tuple[str, str]],
    listing: Mapping[str, Mapping[str, str]],
    *,
    root: str,
    storage: dict[str, Any],
    time: str,
    schema: list[tuple[str, str, bool]],
    record_key: str,
    ordering: str | None = None,
) -> list[RewriteTask]:
    """One rewrite task per (partition, file id), each with its own write token; the old
    file is the group's current file in ``listing`` (None for a new group). ``ordering``:
    the precombine field when stored rows are ordered by event time (else None)."""
    return [
        RewriteTask(
            root=root,
            storage=storage,
            record_key=record_key,
            partition=partition,
            file_id=file_id,
            old_file=listing.get(partition, {}).get(file_id),
            instant=time,
            write_token=f"{n}-0",
            schema=schema,
            precombine=ordering,
        )
        for n, (partition, file_id) in enumerate(targets)
    ]


def duplicate_keys_error(
    operation: str, count: int, sample: Sequence[str], table: str
) -> InputError:
    """The error of an insert whose keys the table already holds (``insert.duplicates=fail``)."""
    shown = ", ".join(repr(k) for k in sample[:10])
    return InputError(
        f"{operation}: {count} key(s) already exist in the table ({shown}"
        f"{', ...' if count > len(sample[:10]) else ''}); nothing was written. Use upsert to "
        "update them, or insert.duplicates='drop' (skip them) or 'upsert' on the table or "
        "the call",
        table=table,
    )


def stale_moves(
    tagged: pa.Table,
    stored_rows: Callable[[str, str, list[str]], pa.Table | None],
    precombine: str,
    record_key: str,
    new: pa.BooleanArray | None = None,
) -> pa.Table:
    """Event-time ordering for keys that change partition: drop each incoming row whose
    precombine value is below the stored row's (the stored row stays where it is; ties go to
    the incoming row). Updates in place are ordered by the rewrite itself
    (``writers.write.filegroup``) or the merge (``writers.write.logmerge``); only the few
    moving rows' old groups are read here (``stored_rows(partition, file id, columns)``: the
    group's rows, None when the listing lacks it: :func:`base_rows`, or a merge-on-read
    slice's merged rows). ``new``: :func:`new_in_partition` of ``tagged``, when the caller
    has it (the rows are returned as they are, the same object, when none is dropped)."""
    held = pc.and_(
        pc.is_valid(tagged.column(OLD_FILE_ID)), pc.is_valid(tagged.column(OLD_PARTITION))
    )
    arriving = new_in_partition(tagged) if new is None else new  # partitions as codes
    moving = pc.and_(arriving, held)
    if not pc.any(moving).as_py():
        return tagged
    rows = np.flatnonzero(moving.to_numpy(zero_copy_only=False))
    where = tagged.select([OLD_PARTITION, OLD_FILE_ID]).take(pa.array(rows)).to_pylist()
    by_file: dict[tuple[str, str], list[int]] = {}
    for row, at in zip(rows.tolist(), where, strict=True):
        by_file.setdefault((at[OLD_PARTITION], at[OLD_FILE_ID]), []).append(row)
    stale = np.zeros(tagged.num_rows, dtype=bool)
    for (partition, file_id), members in by_file.items():
        stored = stored_rows(partition, file_id, [RECORD_KEY, record_key, precombine])
        if stored is None:
            continue  # the listing lacks it: the conflict check decides
        keys = stored.column(RECORD_KEY) if RECORD_KEY in stored.column_names else None
        keys = key_text(keys if keys is not None else stored.column(record_key))
        mine = tagged.take(pa.array(members))
        at = pc.index_in(mine.column(RECORD_KEY), value_set=flat(keys))
        found = pc.is_valid(at).to_numpy(zero_copy_only=False)
        if not found.any():
            continue
        theirs = stored.column(precombine).take(pc.drop_null(at))
        if pa.types.is_dictionary(theirs.type):
            theirs = theirs.cast(theirs.type.value_type)
        ours = mine.column(precombine).filter(pa.array(found)).cast(theirs.type)
        older = pc.less(ours, theirs).to_numpy(zero_copy_only=False)
        stale[np.asarray(members)[found][older]] = True
    return tagged.filter(pa.array(~stale)) if stale.any() else tagged


def base_rows(
    fs: AbstractFileSystem,
    layout: TableLayout,
    files: Mapping[str, Mapping[str, str]],
    partition: str,
    file_id: str,
    columns: list[str],
) -> pa.Table | None:
    """``columns`` (those it has) of a copy-on-write group's current file (None: unlisted)."""
    name = files.get(partition, {}).get(file_id)
    if name is None:
        return None
    return read_parquet(fs, layout.data_file(partition, name), threads=False, columns=columns)
