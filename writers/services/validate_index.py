"""The record index against the current files, for ``validate()``: column by column over
Arrow arrays, no Python object per key (a 10M-key table's comparison took most of a
validation's 90 s as dictionaries of keys).

Given each current file group's index keys (its keys, partition-scoped as the table's index
is), three kinds of problem, each message naming the key:

* a key in two current file groups: every occurrence after the first, groups taken in
  (partition, file id) order ("record key ... is in two files"); the location compared below
  is then the last group's; a key twice in one group ("record key ... is twice in ... file
  group ...");
* a key whose index entry is missing or places it elsewhere (partition, file id: the instant
  that wrote a key is not derivable from files) -- "record_index: key ... is in ... file group
  ..., the index says ...", sorted by key;
* an index entry whose key is in no current file ("... is indexed but in no visible file"),
  unless the entry places it in a damaged group (``damaged``: whose keys could not be read).

Each record-index file group is read once, whole: the current keys the format's hash routes
to it are matched against its entries by one hash lookup (``pyarrow.compute.index_in``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.metadata.hashing import shared_hashes, stable_hashes
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import (
    Partition,
    RecordLocation,
    file_id_to_ints,
    int_to_instant,
    ints_to_file_id,
)

Group = tuple[str, str]  # (partition path, file id)
KEY, OWNER = "key", "owner"


def current_keys(groups: Mapping[Group, pa.Array]) -> tuple[pa.Table, list[Group], list[str]]:
    """The current keys, one row per key (``key``, and ``owner``: its group's index in the
    returned list of groups, sorted), and a problem for every key met again: in a later group
    (the later group keeps the key) or in the same one (a file group holds each key once)."""
    owners = sorted(groups)
    arrays = [groups[g].cast(pa.string()) for g in owners]
    keys = pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())
    owner = np.repeat(np.arange(len(owners), dtype=np.int32), [len(a) for a in arrays])
    again, nxt = _met_again(keys)
    problems = []
    for row, later in zip(again.tolist(), nxt.tolist(), strict=True):
        key, group = keys[row].as_py(), owners[owner[row]]
        if owner[later] == owner[row]:
            problems.append(f"record key {key!r} is twice in {group[0]} file group {group[1]}")
        else:
            problems.append(f"record key {key!r} is in two files")
    table = pa.table({KEY: keys, OWNER: owner})
    if not len(again):
        return table, owners, problems
    keep = np.ones(len(keys), dtype=bool)
    keep[again] = False
    return table.filter(pa.array(keep)), owners, problems


def _met_again(keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose key occurs again in a later row, and for each the next such row. Keys
    are compared by their 64-bit hash first (one numeric sort); only rows sharing a hash are
    compared as text."""
    marked = shared_hashes(stable_hashes(keys))
    if marked is None:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    rows = np.flatnonzero(marked)
    shared = pa.table({"k": keys.take(pa.array(rows)), "r": rows})
    order = pc.sort_indices(shared, sort_keys=[("k", "ascending"), ("r", "ascending")])
    by_key = shared.take(order)
    text, at = by_key.column("k"), by_key.column("r").to_numpy()
    later = pc.equal(text.slice(0, len(text) - 1), text.slice(1)).to_numpy(zero_copy_only=False)
    return at[:-1][later], at[1:][later]


def compare_index(
    reader: MetadataReader,
    current: pa.Table,
    owners: list[Group],
    damaged: Collection[Group] = (),
) -> list[str]:
    """The problems of the record index against ``current`` (:func:`current_keys`)."""
    keys = current.column(KEY).combine_chunks()
    routed = reader.point.index_groups(keys)
    want_hi, want_lo = (np.array(v, np.int64) for v in _ids(owners))
    want_part = pa.array([partition for partition, _ in owners], pa.string())
    owner = current.column(OWNER).to_numpy()
    wrong: list[tuple[int, int, RecordLocation | None]] = []  # row, owner, the index's place
    extra: list[str] = []
    for group in range(reader.point.group_counts[str(Partition.RECORD_INDEX)]):
        mine = np.flatnonzero(routed == group)
        entries = reader.group_table(Partition.RECORD_INDEX, group)
        at = pc.index_in(keys.take(pa.array(mine)), value_set=entries.column(KEY))
        hit = at.is_valid().to_numpy(zero_copy_only=False)
        rows = at.to_numpy(zero_copy_only=False)[hit].astype(np.int64)
        ids = [entries.column(c).to_numpy()[rows] for c in ("file_id_hi", "file_id_lo")]
        places = entries.column("partition").take(pa.array(rows)).cast(pa.string())
        asked, who = mine[hit], owner[mine[hit]]
        moved = (ids[0] != want_hi[who]) | (ids[1] != want_lo[who])
        other = pc.not_equal(places, want_part.take(pa.array(who)))
        moved |= other.to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(moved).tolist():
            wrong.append((int(asked[i]), int(who[i]), _location(entries, int(rows[i]))))
        wrong += [(int(i), int(owner[i]), None) for i in mine[~hit].tolist()]
        unused = np.ones(entries.num_rows, dtype=bool)
        unused[rows] = False
        extra += _extra(entries, np.flatnonzero(unused), damaged)
    problems = sorted(((keys[i].as_py(), owners[o], where) for i, o, where in wrong), key=_first)
    out = [
        f"record_index: key {k!r} is in {p} file group {f}, the index says {where}"
        for k, (p, f), where in problems
    ]
    if extra:  # an entry in a group its key's hash does not route to: reported above only
        held = pc.is_in(pa.array(extra, pa.string()), value_set=keys).to_numpy(zero_copy_only=False)
        extra = [k for k, known in zip(extra, held.tolist(), strict=True) if not known]
    return out + [f"record_index: key {k!r} is indexed but in no visible file" for k in extra]


def _first(item: tuple[str, Group, RecordLocation | None]) -> str:
    return item[0]


def _ids(owners: list[Group]) -> tuple[list[int], list[int]]:
    pairs = [file_id_to_ints(file_id) for _, file_id in owners]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _location(entries: pa.Table, row: int) -> RecordLocation:
    one = entries.slice(row, 1).to_pylist()[0]
    file_id = ints_to_file_id(one["file_id_hi"], one["file_id_lo"])
    return RecordLocation(one["partition"], file_id, int_to_instant(one["instant"]))


def _extra(entries: pa.Table, rows: np.ndarray, damaged: Collection[Group]) -> list[str]:
    """The keys of the index entries at ``rows`` (no current file holds them), less those
    placed in a damaged group."""
    found = []
    for row in rows.tolist():
        where = _location(entries, row)
        if (where.partition, where.file_id) not in damaged:
            found.append(entries.column(KEY)[row].as_py())
    return found
