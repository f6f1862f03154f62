"""The metadata table of one lakebraid table: read points, writes, compaction.

Instants of the metadata table's own (on the metadata timeline only; their bodies are
msgspec JSON, version 1):

* ``compaction`` -- body :class:`CompactionPlan` (the file groups it rewrites). Each group's
  visible slice (base + logs) is folded into a new base ``<group>_<t>.parquet`` whose footer
  lists every instant it holds. Blocks of instants that are not visible are never folded.
* ``reindex`` -- body :class:`ReindexPlan` (new file-group counts), written by
  ``lakebraid.index.reindex``: a full base for every file group of a partition from a given
  state, folding every visible instant; from its completion on, :meth:`MetadataTable.read_point`
  gives its group counts.
* ``index`` -- body :class:`IndexPlan`, written by ``lakebraid.index.secondary_build``: a
  build or drop of a secondary index, as full bases of the ``secondary_index`` partition (like a
  reindex); from its completion on, read points list the column (``ReadPoint.secondary``). Kind
  ``column_stats`` (``lakebraid.index.column_stats_build``): statistics of more columns, as full
  bases of the ``column_stats`` partition; read points list them (``ReadPoint.stats_columns``).

A base is visible to a read point when its compaction or reindex instant completed on the
metadata timeline at or before the read point; old bases and logs stay until cleaned, so reads
as of older instants keep working.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from operator import attrgetter

from lakebraid.metadata import settings
from lakebraid.metadata.arrow_records import records_to_table
from lakebraid.metadata.basewrite import Header, write_base, write_stored
from lakebraid.metadata.commits import checked_logs
from lakebraid.metadata.compaction import due_slices, overtaken
from lakebraid.metadata.compaction_policy import LogPolicy
from lakebraid.metadata.errors import MetadataError
from lakebraid.metadata.hashing import file_group_id
from lakebraid.metadata.indexfold import fold_stored
from lakebraid.metadata.reader import MetadataReader, slice_records, slice_table
from lakebraid.metadata.records import FilesRecord, Partition
from lakebraid.metadata.slices import (
    FileSlice,
    ReadPoint,
    group_files,
)
from lakebraid.metadata.writer import InstantChanges, WrittenLog, write_changes
from lakebraid.timeline.as_of import parse_as_of
from lakebraid.timeline.bodies import CompactionPlan, IndexPlan, ReindexPlan, encode_body
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines, as_of_point
from lakebraid.timeline.timeline import Timeline

BASE_ACTIONS = frozenset({Action.COMPACTION, Action.REINDEX, Action.INDEX})
_TIME = attrgetter("time")
REWRITES = frozenset({Action.REINDEX, Action.INDEX})  # bases of a whole partition, new layout


def default_group_counts(table: TableTimelines) -> dict[str, int]:
    index = table.config.index
    return {
        str(Partition.FILES): index.files_file_groups,
        str(Partition.COLUMN_STATS): index.column_stats_file_groups,
        str(Partition.RECORD_INDEX): index.record_index_file_groups,
        str(Partition.SECONDARY_INDEX): 1,  # until an index build names its count
    }


def _bases(meta: Timeline, point: str | None) -> list[Instant]:
    """The completed base-writing instants of the metadata timeline, in completion order,
    up to ``point`` (from the timeline's per-action lists: no scan of its whole history)."""
    found = [i for action in BASE_ACTIONS for i in meta.of_action(action)]
    found.sort(key=Instant.completion_key)  # runs already in order: linear
    if point is not None:
        found = found[: bisect.bisect_right(found, point, key=lambda i: i.completion_time)]
    return found


class MetadataTable:
    """Driver-side handle on the metadata table of ``table``."""

    def __init__(self, table: TableTimelines):
        self.table = table
        self.fs = table.fs
        self.layout = table.layout
        # (id(global), id(metadata), point) -> (the two timelines, the read point)
        self._points: dict[tuple[int, int, str | None], tuple[Timeline, Timeline, ReadPoint]] = {}

    # ---- reading ---------------------------------------------------------------------
    def read_point(self, as_of: object = None) -> ReadPoint:
        """The read point as of a completion time (or an instant time: after that instant).
        Its form is parsed (``timeline.as_of``); whether a user's point lies in the readable
        history is checked by ``TableTimelines.read_point``."""
        global_timeline = self.table.timeline(TimelineKind.GLOBAL)
        point = as_of_point(global_timeline, parse_as_of(as_of, table=self.table.path))
        meta = self.table.timeline(TimelineKind.METADATA)
        key = (id(global_timeline), id(meta), point)
        known = self._points.get(key)
        if known is not None and known[0] is global_timeline and known[1] is meta:
            return known[2]  # a function of the two (frozen) timelines and the point
        if len(self._points) >= 8:
            self._points.clear()
        found = self._read_point(global_timeline, meta, point)
        self._points[key] = (global_timeline, meta, found)
        return found

    def _read_point(
        self, global_timeline: Timeline, meta: Timeline, point: str | None
    ) -> ReadPoint:
        visibility = self.table.visibility(point, global_timeline)
        bases = _bases(meta, point)
        counts = default_group_counts(self.table)
        reindexed: dict[str, str] = {}
        spans: dict[str, list[int]] = {}  # of the latest record-index reindex
        secondary: dict[str, str] = {}
        stats: dict[str, str] = {}  # columns with built statistics
        for inst in bases:
            if inst.action is Action.REINDEX:
                plan = self.table.store.read_typed(TimelineKind.METADATA, inst, ReindexPlan)
                counts.update(plan.group_counts)
                reindexed.update(dict.fromkeys(plan.group_counts, inst.time))
                if str(Partition.RECORD_INDEX) in plan.group_counts:
                    spans = plan.spans
            elif inst.action is Action.INDEX:
                built = self.table.store.read_typed(TimelineKind.METADATA, inst, IndexPlan)
                counts.update(built.group_counts)
                stats_kind = built.kind == "column_stats"
                rewritten = Partition.COLUMN_STATS if stats_kind else Partition.SECONDARY_INDEX
                reindexed[str(rewritten)] = inst.time
                found = stats if stats_kind else secondary
                for column in built.columns if stats_kind else [built.column]:
                    found.pop(column, None)
                    if built.op == "build":
                        found[column] = inst.time
        seen = {i.time for i in bases} if visibility.rebased else set()
        latest, written, earlier = checked_logs(
            self.table, visibility.visible, meta, bases, reindexed
        )
        return ReadPoint(
            as_of=point,
            visible=tuple(map(_TIME, visibility.visible)),  # C loop: one per visible instant
            undone=visibility.undone,
            bases=tuple(map(_TIME, bases)),
            group_counts=counts,
            reindexed=reindexed,
            rebased={b: r for b, r in visibility.rebased.items() if r in seen},
            secondary=secondary,
            stats_columns=stats,
            pending_indexes=tuple(i.time for i in meta.pending() if i.action is Action.INDEX),
            read_at=visibility.visible[-1].completion_time if visibility.visible else None,
            scoped=self.table.config.index.record_index_scope == "partition",
            spans=spans,
            latest_commit=latest.time if latest is not None else None,
            latest_logs=written,
            earlier_logs=earlier,
        )

    def reader(self, as_of: object = None) -> MetadataReader:
        return MetadataReader(self.fs, self.layout, self.read_point(as_of), self.table.options)

    # ---- writing ---------------------------------------------------------------------
    def write(
        self, instant: str, changes: InstantChanges, point: ReadPoint | None = None
    ) -> list[WrittenLog]:
        """Write the log blocks of data-table instant ``instant`` (pending on the metadata
        timeline as a deltacommit) in the layout (group counts) of ``point``, by default the
        latest read point. A write may take two calls, its record-index entries in one
        (``writers.commit.ahead``) and the rest in the other."""
        point = point or self.read_point()
        options = self.table.options
        upserts = changes.index_upserts
        indexed = bool(len(changes.index_deletes)) or bool(upserts is not None and len(upserts))
        return write_changes(
            self.fs,
            self.layout,
            instant,
            changes,
            point.group_counts,
            options.get(settings.WRITE_THREADS),
            point.index_groups,
            self._commit_base_groups(instant, point) if indexed else frozenset(),
            options.get(settings.BASE_ROW_GROUP_ROWS),
        )

    def commit_bases(self, instant: str, point: ReadPoint) -> tuple[frozenset[int], int]:
        """The record-index groups of ``point``'s layout where ``instant`` writes its entries
        as a commit base (see :meth:`_commit_base_groups`), and a base's rows per row group:
        for a write whose index files are written elsewhere (Spark tasks)."""
        rows = self.table.options.get(settings.BASE_ROW_GROUP_ROWS)
        return self._commit_base_groups(instant, point), rows

    def _commit_base_groups(self, instant: str, point: ReadPoint) -> frozenset[int]:
        """The record-index groups (of ``point``'s layout) that hold no file at all, where
        ``instant`` writes its entries as a commit base (``metadata.writer``); none when commit
        bases are off. One listing. A second write of one instant (tests do that) may not
        follow its commit bases: they fold, so hide, that instant's logs."""
        if not self.table.options.get(settings.COMMIT_BASES):
            return frozenset()
        folder = self.layout.metadata_partition_dir(str(Partition.RECORD_INDEX))
        try:
            names = [str(n).rsplit("/", 1)[-1] for n in self.fs.ls(folder, detail=False)]
        except FileNotFoundError:
            names = []
        if any(n.endswith(f"_{instant}.parquet") for n in names):
            raise MetadataError(
                f"instant {instant} already wrote record-index commit bases: an instant writes "
                "its metadata once (its later logs would be hidden by them)"
            )
        used = group_files(names)
        n = point.group_counts[str(Partition.RECORD_INDEX)]
        return frozenset(
            i for i in range(n) if file_group_id(str(Partition.RECORD_INDEX), i) not in used
        )

    def base_neighbours(self, instant: str, groups: Collection[str]) -> frozenset[str]:
        """Instants of other files now in the record-index file groups where ``instant``
        wrote commit bases (``groups``). Readers pick one base per group, so with any such
        file ``instant`` must not complete (writers' conflict rule 7). One listing; call it
        under the table lock, right before completing."""
        if not groups:
            return frozenset()
        folder = self.layout.metadata_partition_dir(str(Partition.RECORD_INDEX))
        found = group_files(str(n).rsplit("/", 1)[-1] for n in self.fs.ls(folder, detail=False))
        return frozenset(
            f.instant for group in groups for f in found.get(group, []) if f.instant != instant
        )

    # ---- compaction ------------------------------------------------------------------
    def compact(
        self,
        partitions: Iterable[Partition] | None = None,
        *,
        min_logs: int = 1,
        min_log_bytes: int | None = None,
    ) -> str | None:
        """Fold the visible log files of every file group holding at least ``min_logs`` of
        them or ``min_log_bytes`` of logs (either suffices) into new bases, as one compaction
        instant. Returns its time; None: no work, or it was abandoned (left pending, its bases
        deleted, never read) because a reindex ran meanwhile and its bases are in the old
        layout, or another compaction of one of its groups completed since its read point
        (``metadata.compaction``), three times in a row: each attempt plans afresh, from the
        bases that overtook the one before."""
        policy = LogPolicy(max_log_files=max(1, min_logs), max_log_bytes=min_log_bytes)
        return self._compact(partitions, policy, attempts=3)

    def _compact(
        self, partitions: Iterable[Partition] | None, policy: LogPolicy, attempts: int = 1
    ) -> str | None:
        """:meth:`compact` of the file groups ``policy`` says are due, planned again when an
        attempt is abandoned, up to ``attempts`` in all."""
        for _ in range(attempts):
            time, abandoned = self._compact_once(partitions, policy)
            if not abandoned:
                return time
        return None

    def _compact_once(
        self, partitions: Iterable[Partition] | None, policy: LogPolicy
    ) -> tuple[str | None, bool]:
        """One attempt of :meth:`_compact`: its time (None: no work) and whether it was
        abandoned."""
        point = self.read_point()
        reader = MetadataReader(self.fs, self.layout, point, self.table.options)
        metadata_timeline = self.table.timeline(TimelineKind.METADATA)

        @cache
        def services() -> frozenset[str]:  # instants whose bases are not commit bases
            return frozenset(
                i.time for i in metadata_timeline if i.action is not Action.DELTACOMMIT
            )

        work = due_slices(reader, partitions or list(Partition), policy, services)
        if not work:
            return None, False
        store, meta = self.table.store, TimelineKind.METADATA
        with self.table.lock:
            time = self.table.next_time()
            plan = CompactionPlan(groups=[p.file_group for _, p in work])
            store.request(meta, time, Action.COMPACTION, encode_body(plan))
        folded = {p.file_group: sorted(p.folded | set(p.log_instants)) for _, p in work}
        logs = {p.file_group: sorted(set(p.log_instants)) for _, p in work}
        inflight = CompactionPlan(groups=plan.groups, folded=logs)  # bounded: no history
        store.start(meta, time, Action.COMPACTION, encode_body(inflight))

        try:
            self._fold_all(reader, work, time, folded)
        except BaseException:
            self._drop_bases(work, time)  # never completes: nothing reads them
            raise
        with self.table.lock:  # a fresh load: nothing completes meanwhile
            now = self.table.timeline(TimelineKind.METADATA)
            missed = self.missed_rewrites(point.bases, now)
            abandon = bool(missed or overtaken(store, now, point.bases, plan.groups))
            if not abandon:
                store.complete(meta, time, Action.COMPACTION, encode_body(inflight))
        if abandon:  # left pending: nothing reads a pending instant's bases
            self._drop_bases(work, time)
        return time, abandon

    def _fold_all(
        self,
        reader: MetadataReader,
        work: list[tuple[Partition, FileSlice]],
        time: str,
        folded: dict[str, list[str]],
    ) -> None:
        """:meth:`_fold` every slice of ``work`` on up to ``metadata.write.threads`` threads."""

        def fold(item: tuple[Partition, FileSlice]) -> None:
            partition, piece = item
            self._fold(reader.folder(partition), partition, piece, time, folded[piece.file_group])

        threads = min(self.table.options.get(settings.WRITE_THREADS), len(work))
        if threads <= 1:
            for item in work:
                fold(item)
        else:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(fold, work))  # list(): re-raise the first failure

    def _drop_bases(self, work: list[tuple[Partition, FileSlice]], time: str) -> None:
        """Delete the bases compaction ``time`` wrote for ``work`` (those it got to)."""
        for partition, piece in work:
            path = self.layout.metadata_base_file(str(partition), piece.file_group, time)
            try:
                self.fs.rm(path)
            except FileNotFoundError:  # its fold failed before writing it
                continue

    def rewrites(self, meta: Timeline | None = None) -> list[tuple[Instant, bool]]:
        """The reindex and index instants of the metadata timeline (``meta``: as loaded
        already; each rewrites a whole partition), each with whether it is running (pending
        and its writer's heartbeat live; a dead one never completes)."""
        meta = meta if meta is not None else self.table.timeline(TimelineKind.METADATA)
        alive = self.table.is_alive
        return [(i, i.is_pending and alive(i.time)) for i in meta if i.action in REWRITES]

    def missed_rewrites(self, seen: Collection[str], meta: Timeline | None = None) -> list[str]:
        """The rewrites a layout chosen at a read point whose bases are ``seen`` misses:
        completed since, or running (bases folded from it would be in an old layout)."""
        return [
            i.time
            for i, running in self.rewrites(meta)
            if running or (i.is_completed and i.time not in seen)
        ]

    def _fold(
        self, folder: str, partition: Partition, piece: FileSlice, time: str, folded: list[str]
    ) -> None:
        """Write the base of compaction ``time`` for one file slice: its merged rows (files
        records in full state), holding the instants ``folded``. A record-index slice is
        folded in its base's stored form when it allows (``metadata.indexfold``)."""
        path = self.layout.metadata_base_file(str(partition), piece.file_group, time)
        rows = self.table.options.get(settings.BASE_ROW_GROUP_ROWS)
        if partition is Partition.RECORD_INDEX:
            stored = fold_stored(self.fs, folder, piece)
            if stored is not None:
                header = Header(str(partition), piece.file_group, time, folded, rows)
                write_stored(self.fs, path, stored.rows, header, stored.codec, stored.locations)
                return
        if partition is Partition.FILES:
            state = slice_records(self.fs, folder, partition, piece).values()
            full = [r.full_state() for r in state if isinstance(r, FilesRecord)]
            merged = records_to_table(partition, full)
        else:
            merged, _ = slice_table(self.fs, folder, partition, piece)
        write_base(
            self.fs,
            path,
            merged,
            partition=str(partition),
            file_group=piece.file_group,
            instant=time,
            folded=folded,
            row_group_rows=rows,
        )

    def compact_if_due(self) -> str | None:
        """The inline compaction a writer runs after its commit: of the file groups
        ``metadata.compaction_policy`` says are due under the table's config."""
        policy = LogPolicy.of(self.table.options)
        return self._compact(None, policy) if policy.inline else None
