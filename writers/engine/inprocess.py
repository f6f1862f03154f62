"""The in-process engine: writes and deletes of pyarrow tables, file groups rewritten on a
few threads of this process.

:func:`write_rows` and :func:`delete_keys` run one operation end to end (check the input,
prepare and de-duplicate, tag through the record index, route, rewrite, commit through
``writers.commit.transaction.run_write``). Rewrites run ``writers.write.filegroup
.rewrite_file_group`` on (task, rows) pairs, the same function the Spark engine
(``writers.engine.spark.pipeline``) runs in executors; small writes and pyarrow or pandas
input take this path so they pay for no Spark job.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from time import perf_counter
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.file_groups import current_files, current_slices
from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.lookup import locate
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION, tag
from lakebraid.index.scope import index_keys, is_scoped, split_keys
from lakebraid.metadata.arrow_records import empty_table, taken_by_key
from lakebraid.metadata.commits import WriteStatus, schema_as_of
from lakebraid.metadata.hashing import group_order
from lakebraid.metadata.records import Partition
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline import progress
from lakebraid.timeline.durable import (
    filesystem,
    is_local,
    make_all_durable,
    make_durable,
    storage_of,
)
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec
from lakebraid.writers import settings
from lakebraid.writers.commit.transaction import run_write
from lakebraid.writers.engine.compaction import compact_if_due
from lakebraid.writers.write.datafile import spec_of, virtual_key
from lakebraid.writers.write.filegroup import (
    OP,
    OP_DELETE,
    OP_UPSERT,
    RewriteTask,
    rewrite_file_group,
)
from lakebraid.writers.write.inputs import check_input, normalize_input
from lakebraid.writers.write.logappend import (
    AppendTask,
    append_to_file_group,
    mark_in_group,
    write_tasks,
)
from lakebraid.writers.write.marking import mark_all
from lakebraid.writers.write.newgroups import qualifies, write_new_groups
from lakebraid.writers.write.operations import apply_duplicates, insert_room, ordering
from lakebraid.writers.write.route import (
    PARTITION,
    TARGET_FILE_ID,
    WORK_COLUMNS,
    base_rows,
    codes,
    deduplicate,
    insert_counts,
    key_copies,
    key_hashes,
    new_in_partition,
    plan_slots,
    prepare,
    route,
    row_index_keys,
    stale_moves,
    with_key_hashes,
)
from lakebraid.writers.write.slices import slice_rows

SYNC_THREADS = 4  # fsync waits on the disk, not the CPU
BATCHED_GROUPS = 16  # new small file groups in one write from which they are written together
BATCH_BYTES = 256 << 20  # rows (in Arrow bytes) of the new small groups written in one batch


class Work(NamedTuple):
    """One file group's rewrite (or, merge-on-read, append): its rows are ``rows`` at
    ``positions`` (all of ``rows`` when None), taken on the engine's thread."""

    task: RewriteTask | AppendTask
    rows: pa.Table
    positions: np.ndarray | None = None
    copies: tuple[str, ...] = ()  # columns of ``rows`` holding the record keys themselves

    def size(self) -> int:
        return self.rows.num_rows if self.positions is None else len(self.positions)

    def rewrites(self) -> bool:
        """Whether it rewrites an existing file (the costliest kind)."""
        return isinstance(self.task, RewriteTask) and self.task.old_file is not None

    def run(self, sync: bool = True, marked: bool = False) -> WriteStatus:
        positions = self.positions
        if positions is None:
            rows = self.rows
        elif isinstance(self.task, RewriteTask) and not self.rewrites():
            # a new group's rows sorted by key as taken: its file is written as taken
            rows = taken_by_key(self.rows, RECORD_KEY, positions, self.copies)
        else:
            rows = self.rows.take(pa.array(positions))
        if isinstance(self.task, AppendTask):
            return append_to_file_group(self.task, rows, sync=sync, marked=marked)
        return rewrite_file_group(self.task, rows, sync=sync, marked=marked)


class InProcessEngine:
    """Runs tasks in this process on a few threads (pyarrow releases the GIL). Every written
    file is durable before :meth:`rewrite` returns (so before any commit names it): a few
    files are fsynced on separate I/O threads while other rewrites run; from ``batch_files``
    files (``write.sync.batch.files``) on local disk, one batch marker names them all before
    the first is written and one ``syncfs`` makes them durable after the last
    (``timeline.durable.make_all_durable``)."""

    def __init__(
        self, threads: int | None = None, batch_files: int = settings.SYNC_BATCH_FILES.default
    ):
        self.threads = threads or max(2, os.cpu_count() or 2)
        self.batch_files = batch_files  # 0: never batch

    def rewrite(self, work: Sequence[Work]) -> list[WriteStatus]:
        """Statuses in the order of ``work``; the largest tasks start first (rewrites of an
        existing file, then by incoming rows), so no thread is left with a big one at the end."""
        if not work:
            return []
        order = sorted(
            range(len(work)),
            key=lambda i: (work[i].rewrites(), work[i].size()),
            reverse=True,
        )
        fs, root = filesystem(work[0].task.root, work[0].task.storage)
        layout = TableLayout(root)
        batch = is_local(fs) and 0 < self.batch_files <= len(work)
        if batch:
            mark_all(fs, layout, work[0].task.instant, [w.task.output() for w in work])
        few = _new_and_small(work)
        batched = set(few)
        order = [i for i in order if i not in batched]
        with (
            ThreadPoolExecutor(max(1, min(self.threads, len(order)))) as pool,
            ThreadPoolExecutor(SYNC_THREADS) as syncer,
            progress.task("write data files", total=len(work)) as bar,
        ):
            if few:
                together = _write_batched(work, few, sync=not batch, marked=batch, done=bar.advance)

            def one(i: int) -> tuple[WriteStatus, Future[None] | None]:
                status = work[i].run(sync=False, marked=batch)
                bar.advance()
                if status.file_name is None or batch:
                    return status, None
                path = f"{layout.partition_dir(status.partition)}/{status.file_name}"
                return status, syncer.submit(make_durable, fs, path)

            done = dict(zip(order, pool.map(one, order), strict=True))
            if few:
                done.update((i, (status, None)) for i, status in zip(few, together, strict=True))
            for _, durable in done.values():
                if durable is not None:
                    durable.result()  # re-raises a failed fsync: nothing is committed then
        statuses = [done[i][0] for i in range(len(work))]
        if batch:
            written = [s for s in statuses if s.file_name is not None]
            paths = [f"{layout.partition_dir(s.partition)}/{s.file_name}" for s in written]
            make_all_durable(fs, root, paths)
        return statuses


def _new_and_small(work: Sequence[Work]) -> list[int]:
    """The work items written together by ``writers.write.newgroups`` (new groups of few
    rows taken from one table), if there are at least ``BATCHED_GROUPS`` of them."""
    few = [
        i
        for i, w in enumerate(work)
        if w.positions is not None and w.rows is work[0].rows and qualifies(w.task, w.size())
    ]
    return few if len(few) >= BATCHED_GROUPS else []


def _write_batched(work: Sequence[Work], few: list[int], **options: Any) -> list[WriteStatus]:
    """``writers.write.newgroups`` over ``few``, in batches of about ``BATCH_BYTES`` of rows
    each (a batch holds a copy of its rows: memory stays bounded whatever the write)."""
    rows = work[few[0]].rows
    per_row = max(1, rows.nbytes // max(1, rows.num_rows))
    sizes = np.array([work[i].size() for i in few], dtype=np.int64) * per_row
    batch_of = ((np.cumsum(sizes) - sizes) // BATCH_BYTES).tolist()  # by where each starts
    statuses: list[WriteStatus] = []
    for _, members in itertools.groupby(zip(batch_of, few, strict=True), key=lambda p: p[0]):
        chunk = [i for _, i in members]
        tasks = [work[i].task for i in chunk]
        positions = [work[i].positions for i in chunk]
        statuses += write_new_groups(tasks, rows, positions, **options)  # type: ignore[arg-type]
    return statuses


def write_rows(
    table: TableTimelines,
    metadata: MetadataTable,
    incoming: pa.Table,
    operation: str,
    policy: str,
) -> str:
    """Insert, bulk insert or upsert ``incoming`` as one commit; returns its instant time.
    ``policy``: what to do with keys the table holds (``write.operations.resolve_policy``)."""
    started = perf_counter()
    config = table.config
    incoming = normalize_input(incoming, table=table.path)
    schema = check_input(incoming, config, schema_as_of(table), table=table.path)
    scoped = is_scoped(config)
    prepared = prepare(incoming, config.record_key, config.partition_fields, coded=True)
    prepared = with_key_hashes(prepared)
    prepared = deduplicate(prepared, config.precombine_field, scoped)
    prepared = prepared.append_column(
        OP, pa.repeat(pa.scalar(OP_UPSERT, pa.int8()), prepared.num_rows)
    )
    reader = metadata.reader()
    files = reader.files()
    listing = current_files(files)
    if listing:  # an empty table holds no key: no lookup
        keys, hashes = row_index_keys(prepared, scoped), key_hashes(prepared, scoped)
        found, at = locate(reader, keys, hashes)  # de-duplicated above
        tagged = tag(prepared, found, at)
        tagged, operation = apply_duplicates(tagged, operation, policy, table.path)
        field = ordering(table)
        if field is not None:
            key = config.record_key
            tagged = stale_moves(tagged, stored_rows(table, listing, files), field, key)
    else:
        tagged = tag(prepared, empty_table(Partition.RECORD_INDEX))
    new = new_in_partition(tagged)
    counts = insert_counts(tagged, new)
    room = insert_room(table, reader, listing, operation, counts.keys())
    plan = plan_slots(counts, listing, target_rows=room.target, small_rows=room.small)
    routed = route(tagged, plan, new)
    read_at = reader.point.read_at
    layout = Layout(listing, files, table.config.merge_on_read)
    return _commit(table, metadata, operation, routed, schema, layout, read_at, started)


def stored_rows(
    table: TableTimelines,
    listing: Mapping[str, Mapping[str, str]],
    files: Mapping[str, Mapping[str, int]],
) -> Callable[[str, str, list[str]], pa.Table | None]:
    """How ``stale_moves`` reads a group's stored rows: its base file, or in a merge-on-read
    table its slice merged (a log may hold the newer row)."""
    if not table.config.merge_on_read:
        return partial(base_rows, table.fs, table.layout, listing)
    spec = spec_of(schema_as_of(table))
    slices = current_slices(files)
    key, order = table.config.record_key, ordering(table)
    return partial(slice_rows, table.fs, table.layout, slices, spec, key, order)


def delete_keys(
    table: TableTimelines,
    metadata: MetadataTable,
    keys: pa.Array,
    partitions: pa.Array | None = None,
) -> str:
    """Delete ``keys`` (canonical key text; absent keys are ignored) as one commit.
    ``partitions``: each key's partition path, for a partition-scoped record index."""
    started = perf_counter()
    wanted = pc.unique(index_keys(keys, partitions))
    plain = wanted if partitions is None else split_keys(wanted)[1]
    rows = pa.table({RECORD_KEY: plain})
    reader = metadata.reader()
    tagged = tag(rows, *locate(reader, wanted))
    tagged = tagged.filter(pc.is_valid(tagged.column(OLD_FILE_ID)))
    tagged = tagged.append_column(PARTITION, tagged.column(OLD_PARTITION))
    tagged = tagged.append_column(OP, pa.repeat(pa.scalar(OP_DELETE, pa.int8()), tagged.num_rows))
    routed = tagged.append_column(TARGET_FILE_ID, tagged.column(OLD_FILE_ID))
    files = reader.files()
    layout = Layout(current_files(files), files, table.config.merge_on_read)
    schema = schema_as_of(table)
    read_at = reader.point.read_at
    return _commit(table, metadata, "delete", routed, schema, layout, read_at, started)


def _commit(
    table: TableTimelines,
    metadata: MetadataTable,
    operation: str,
    routed: pa.Table,
    schema: list[FieldSpec],
    layout: Layout,
    read_at: str | None,
    started: float | None = None,
) -> str:
    if layout.merge_on_read:
        routed = mark_in_group(routed)

    def write(time: str) -> list[WriteStatus]:
        engine = InProcessEngine(batch_files=table.options.get(settings.SYNC_BATCH_FILES))
        return engine.rewrite(tasks_of(table, routed, layout, time, schema))

    time = run_write(table, metadata, operation, read_at, schema, write, started)
    if layout.merge_on_read:
        compact_if_due(table, metadata)  # never fails the write
    return time


class Layout(NamedTuple):
    """The data file groups a write found at its read point."""

    listing: Mapping[str, Mapping[str, str]]  # partition -> file id -> base file
    files: Mapping[str, Mapping[str, int]]  # the ``files`` listing: name -> size
    merge_on_read: bool = False

    def tasks(self, targets: list[tuple[str, str]], **common: object) -> Sequence[Any]:
        return write_tasks(targets, self.listing, self.files, self.merge_on_read, **common)


def tasks_of(
    table: TableTimelines,
    routed: pa.Table,
    layout: Layout,
    time: str,
    schema: Sequence[FieldSpec],
) -> list[Work]:
    """One rewrite (merge-on-read: append) task per target file group, with the positions
    of its rows in the payload (the engine takes them on its threads)."""
    if routed.num_rows == 0:
        return []
    (parts, ids), names = codes([routed.column(PARTITION), routed.column(TARGET_FILE_ID)])
    order, starts, targets = _grouped(parts, ids, names.to_pylist())
    payload = routed.drop_columns([c for c in WORK_COLUMNS if c in routed.column_names])
    virtual = virtual_key(spec_of(schema), table.config.record_key) is not None
    copies = key_copies(payload, table.config.record_key, virtual)
    payload = _combined(payload, copies)
    tasks = layout.tasks(
        targets,  # type: ignore[arg-type]
        root=table.fs.unstrip_protocol(table.layout.root),
        storage=storage_of(table.fs),
        time=time,
        schema=spec_of(schema),
        record_key=table.config.record_key,
        ordering=ordering(table),
    )
    ends = [*starts[1:], len(order)]
    return [
        Work(task, payload, order[start:end], copies)
        for task, start, end in zip(tasks, starts, ends, strict=True)
    ]


def _grouped(
    parts: np.ndarray, ids: np.ndarray, text: list[str]
) -> tuple[np.ndarray, list[int], list[tuple[str, str]]]:
    """The rows ordered by target file group (codes of ``text``: ``parts`` the partitions,
    ``ids`` the file ids), where each group starts in that order, and its (partition, file
    id). A file id lives in one partition, so its rows are counted, not compared in order;
    an id met in two partitions (never written so) is two groups, by a sort of the pairs."""
    order = group_order(ids, len(text))  # rows by file id (radix sort of small codes)
    home = np.zeros(len(text), dtype=parts.dtype)
    home[ids] = parts  # a partition of each id (the last row's)
    if not np.any(home[ids] != parts):
        counts = np.bincount(ids, minlength=len(text))
        present = np.flatnonzero(counts)
        starts = [0, *np.cumsum(counts[present])[:-1].tolist()]
        return order, starts, [(text[home[i]], text[i]) for i in present.tolist()]
    pairs = parts.astype(np.int64) * len(text) + ids
    order = order[np.argsort(pairs[order], kind="stable")]
    pairs = pairs[order]
    first = np.flatnonzero(np.concatenate([[True], pairs[1:] != pairs[:-1]]))
    return order, first.tolist(), [(text[parts[i]], text[ids[i]]) for i in order[first].tolist()]


def _combined(payload: pa.Table, copies: Sequence[str]) -> pa.Table:
    """``payload`` in one chunk per column; the record keys, when ``copies`` holds the same
    values, are that column itself (copied once, not twice)."""
    if not copies:
        return payload.combine_chunks()
    at = payload.schema.get_field_index(RECORD_KEY)
    field = payload.schema.field(RECORD_KEY)
    combined = payload.remove_column(at).combine_chunks()
    return combined.add_column(at, field, combined.column(copies[0]))
