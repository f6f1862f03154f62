"""Metadata compaction: which file slices are due, and the rule that lets one complete.

:meth:`metadata.table.MetadataTable.compact` plans from a read point, writes one base per due
file slice, then completes under the table lock. Readers rank a group's visible bases by the
completion order of the instants that wrote them (``metadata.slices.build_slice``) and the
cleaner deletes the logs the newest base folds (``writers.services.clean``), so each base must
fold everything an earlier-completed base of its group folds. Two compactions of one group that
overlap in time break that when the one that planned first completes last: its base folds less
(it may even have planned before the other's base existed), ranks newest, and needs logs the
cleaner deletes, so reads silently lose the changes those logs held. :func:`overtaken` is the
rule that prevents it: a compaction completes only if no compaction of one of its groups
completed since its read point; otherwise it is abandoned (left pending, its bases deleted,
never read): an inline compaction leaves the work to the next write's due check, an explicit
one (:meth:`~metadata.table.MetadataTable.compact`) plans again from the newer base.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from functools import partial

from fsspec import AbstractFileSystem

from lakebraid.metadata.basefile import base_info
from lakebraid.metadata.compaction_policy import Entries, LogPolicy, base_bytes
from lakebraid.metadata.logblock import BlockType, read_log_file
from lakebraid.metadata.reader import MetadataReader
from lakebraid.metadata.records import Partition
from lakebraid.metadata.slices import FileSlice, visible_rank
from lakebraid.timeline.bodies import CompactionPlan
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.store import InstantStore
from lakebraid.timeline.timeline import Timeline


def overtaken(
    store: InstantStore, meta: Timeline, seen: Collection[str], groups: Collection[str]
) -> list[str]:
    """The compactions completed on the metadata timeline ``meta`` that are not among ``seen``
    (the bases of the read point a compaction planned from) and rewrote one of ``groups``;
    in completion order. Call it with ``meta`` loaded under the table lock (compactions
    complete under it)."""
    known = set(seen)
    newer = []
    for inst in reversed(meta.of_action(Action.COMPACTION)):  # the unseen ones are a suffix
        if inst.time in known:
            break
        newer.append(inst)
    return _rewrote(store, reversed(newer), groups)


def abandoned_by(store: InstantStore, meta: Timeline, pending: Instant) -> str | None:
    """For a pending compaction of the metadata timeline ``meta``: an instant that completed
    after it was requested (so after its read point) and makes it one that can never complete
    -- a compaction of one of its file groups (:func:`overtaken`), or a reindex or index build
    (its bases would be in an old layout); None when there is none (it may be running, or its
    writer died). Its plan is read from the file the listing gave."""
    after = [
        i
        for action in (Action.REINDEX, Action.INDEX, Action.COMPACTION)
        for i in meta.of_action(action)
        if (i.completion_time or "") > pending.time
    ]
    rewrites = [i.time for i in after if i.action is not Action.COMPACTION]
    if rewrites:
        return min(rewrites)
    plan = store.read_typed(TimelineKind.METADATA, pending, CompactionPlan)
    found = _rewrote(store, after, plan.groups)  # compactions, in completion order
    return found[0] if found else None


def _rewrote(store: InstantStore, done: Iterable[Instant], groups: Collection[str]) -> list[str]:
    """The completed compactions of ``done`` whose plan names one of ``groups``."""
    wanted = set(groups)
    return [
        inst.time
        for inst in done
        if wanted.intersection(store.read_typed(TimelineKind.METADATA, inst, CompactionPlan).groups)
    ]


def due_slices(
    reader: MetadataReader,
    partitions: Iterable[Partition],
    policy: LogPolicy,
    services: Callable[[], frozenset[str]] = frozenset,
) -> list[tuple[Partition, FileSlice]]:
    """The file slices ``policy`` says are due, less the record-index groups holding a commit
    base of an instant not visible yet: a base folded without it would hide it once it completes.
    ``services()`` gives the metadata instants whose bases are not commit bases (asked only
    when a record-index group holds a base: it scans the timeline)."""
    work: list[tuple[Partition, FileSlice]] = []
    point = reader.point
    rank = visible_rank(point)

    def known(time: str) -> bool:
        return time in rank or time in point.undone or time in point.rebased or time in services()

    for partition in partitions:
        listing = reader.listing(partition)
        for piece in reader.slices(partition):
            waiting = partition is Partition.RECORD_INDEX and any(
                f.kind == "base" and not known(f.instant) for f in listing.get(piece.file_group, [])
            )
            entries = partial(_entries, reader, partition, piece)
            if not waiting and policy.due(piece, base_bytes(listing, piece), entries):
                work.append((partition, piece))
    return work


def _entries(reader: MetadataReader, partition: Partition, piece: FileSlice) -> Entries:
    """The entries of ``piece``'s base (its footer's row count) and of its logs, these
    estimated from their sizes at the newest log's bytes per entry (:func:`log_records`):
    one log read however many the group holds, so a group that waits for the ratio costs a
    writer at most two reads per commit on an object store. Logs of unknown size are all
    read."""
    fs, folder = reader.fs, reader.folder(partition)
    base = base_info(fs, f"{folder}/{piece.base}").num_rows if piece.base else 0
    files = piece.log_files()
    name, size = files[-1]
    newest = log_records(fs, f"{folder}/{name}")
    if size and all(known for _, known in files):
        return Entries(base, round(newest * piece.log_bytes / size))
    return Entries(base, newest + sum(log_records(fs, f"{folder}/{n}") for n, _ in files[:-1]))


def log_records(fs: AbstractFileSystem, path: str) -> int:
    """The entries a metadata log file holds: its blocks' header record counts (command
    blocks left out), read without decoding a body."""
    blocks = read_log_file(fs, path, with_records=False)
    return sum(b.header.record_count for b in blocks if b.block_type is not BlockType.COMMAND)
