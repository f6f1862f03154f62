"""Merge-on-read writes of one file group: a commit's upserts and deletes of the group become
one log file ``<file id>_<write token>_<instant>.log`` (``timeline.layout``) of log blocks
(``index.datalog``): a delete block of the keys it deletes, then a data block of the
rows it upserts. The base file and earlier logs are not read: a reader merges them
(``writers.write.logmerge``) and a compaction folds them.

Which keys are new to the group comes from the record index (the caller's tag,
``_braid_in_group``): an upsert of a key the group holds writes no index entry; a new key
(inserted, or moved in from another partition) and a deleted key do. The log's marker
(``writers.write.marking``) is created before it, as for base
files, so rollback and recovery find it.

Each block's footer carries the keys of the slice's logs so far (RFC-06): the writer reads
the footer of the slice's newest log (``previous_log``) and extends it
(``logfooter.slice_after``). Plain picklable data in and out: Spark executors run it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from lakebraid.index.datalog import (
    encode_data_block,
    encode_delete_block,
    read_last_footer,
)
from lakebraid.index.file_groups import DataSlice, current_slices
from lakebraid.index.file_stats import column_stats
from lakebraid.index.keys import RECORD_KEY
from lakebraid.index.logfooter import SliceKeys
from lakebraid.index.record_index import OLD_FILE_ID, OLD_PARTITION
from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.checksum import crc32
from lakebraid.metadata.commits import WriteStatus, pack_keys
from lakebraid.timeline.durable import (
    filesystem,
    is_local,
    make_durable,
    make_folder,
    sync_new_files,
)
from lakebraid.timeline.layout import TableLayout, data_file_name
from lakebraid.writers.write.datafile import conform, data_schema, stamped
from lakebraid.writers.write.filegroup import OP, OP_UPSERT, RewriteTask, rewrite_file_group
from lakebraid.writers.write.marking import mark
from lakebraid.writers.write.partition_codes import codes
from lakebraid.writers.write.route import PARTITION, TARGET_FILE_ID, rewrite_tasks

IN_GROUP = "_braid_in_group"  # bool column of the incoming rows: the group holds the key


def mark_in_group(routed: pa.Table) -> pa.Table:
    """``routed`` (rows tagged by the record index and routed: ``writers.write.route``) with
    ``_braid_in_group``: whether the row's target file group holds its key already (an update
    or a delete there; False for an insert or a key moving in). The file ids and partitions
    are compared as dictionary codes (``partition_codes.codes``): no text per row."""
    (old_ids, targets), _ = codes([routed.column(OLD_FILE_ID), routed.column(TARGET_FILE_ID)])
    same = (old_ids >= 0) & (old_ids == targets)
    if same.any():  # an insert-only write (a bulk insert) compares no partitions
        (old_parts, parts), _ = codes([routed.column(OLD_PARTITION), routed.column(PARTITION)])
        same &= (old_parts >= 0) & (old_parts == parts)
    return routed.append_column(IN_GROUP, pa.array(same))


class AppendTask(msgspec.Struct, frozen=True, kw_only=True):
    root: str  # fsspec URL of the table
    storage: dict[str, Any] = {}  # storage options (timeline.durable.storage_of)
    partition: str
    file_id: str
    base_file: str | None  # the slice's base (not read; kept in the status)
    previous_log: str | None = None  # the slice's newest log, whose footer is extended
    previous_size: int = 0  # its size, from the files listing
    instant: str
    write_token: str
    schema: list[tuple[str, str, bool]]  # (name, type text, nullable) of the table
    stats_columns: list[str] = []  # the columns whose statistics the metadata records

    def output(self) -> str:
        """The path (relative to the table root) of the log the task writes, if any."""
        return f"{self.partition}/{self.file_name()}".lstrip("/")

    def file_name(self) -> str:
        return data_file_name(self.file_id, self.write_token, self.instant, "log")


def append_to_file_group(
    task: AppendTask, incoming: pa.Table, *, sync: bool = True, marked: bool = False
) -> WriteStatus:
    """Append ``incoming`` (upserts and deletes of this group, ``_braid_in_group`` telling
    the keys it holds) as one log file; see the module doc. ``sync=False``: the caller makes
    the file durable before it commits; ``marked=True``: the caller's batch marker names it."""
    fs, root = filesystem(task.root, task.storage)
    layout = TableLayout(root)
    is_upsert = pc.equal(incoming.column(OP), OP_UPSERT)
    held = pc.fill_null(incoming.column(IN_GROUP), False)
    upserts = incoming.filter(is_upsert)
    deletes = incoming.filter(pc.and_(pc.invert(is_upsert), held))
    new = upserts.filter(pc.invert(pc.fill_null(upserts.column(IN_GROUP), False)))
    status: dict[str, Any] = dict(
        partition=task.partition,
        file_id=task.file_id,
        old_file=None,
        inserts=new.num_rows,
        updates=upserts.num_rows - new.num_rows,
        deletes=deletes.num_rows,
        keys_added=pack_keys(flat(new.column(RECORD_KEY))),
        keys_removed=pack_keys(flat(deletes.column(RECORD_KEY))),
    )
    if upserts.num_rows == 0 and deletes.num_rows == 0:
        return WriteStatus(file_name=None, base_file=task.base_file, **status)
    previous = None
    if task.previous_log is not None:
        path = f"{layout.partition_dir(task.partition)}/{task.previous_log}"
        previous = read_last_footer(fs, path, task.previous_size).slice
    rows = conform(stamped(upserts, task.instant), data_schema(task.schema))
    data = _blocks(task, deletes.column(RECORD_KEY), rows, previous, not is_local(fs))
    name = task.file_name()
    _write_log(fs, layout, task, name, data, sync, marked)
    present = [c for c in task.stats_columns if c in rows.column_names]
    return WriteStatus(
        file_name=name,
        base_file=task.base_file,
        previous_log=task.previous_log,
        size=len(data),
        crc32=crc32(data),
        rows=rows.num_rows,
        stats=column_stats(rows, None, present),  # deletes only: no rows, no values
        **status,
    )


def _blocks(
    task: AppendTask,
    deleted: pa.ChunkedArray,
    rows: pa.Table,
    previous: SliceKeys | None,
    compressed: bool,
) -> bytes:
    """The log file's bytes: the delete block (if any), then the data block (if any); their
    bodies compressed on object stores only (``index.datalog``)."""
    where: dict[str, Any] = dict(
        instant=task.instant, partition=task.partition, file_id=task.file_id, compressed=compressed
    )
    parts = []
    if len(deleted):
        block, previous = encode_delete_block(pc.unique(flat(deleted)), previous=previous, **where)
        parts.append(block)
    if rows.num_rows:
        block, _ = encode_data_block(rows.combine_chunks(), previous=previous, **where)
        parts.append(block)
    return b"".join(parts)


def _write_log(
    fs: Any,
    layout: TableLayout,
    task: AppendTask,
    name: str,
    data: bytes,
    sync: bool,
    marked: bool,
) -> None:
    """The marker (unless the caller's batch marker names the log), then the log file (one
    put: an object store has no append)."""
    if not marked:
        mark(fs, layout, task.instant, task.partition, name)
    folder = layout.partition_dir(task.partition)
    make_folder(fs, folder)
    path = f"{folder}/{name}"
    fs.pipe_file(path, data)
    if sync:
        make_durable(fs, path)


def merge_on_read_tasks(
    targets: Sequence[tuple[str, str]],
    slices: Mapping[str, Mapping[str, DataSlice]],
    sizes: Mapping[str, Mapping[str, int]],
    **common: Any,
) -> list[RewriteTask | AppendTask]:
    """The tasks of a merge-on-read write, one per (partition, file id) of ``targets``: an
    append to each group the table holds (its slice from ``current_slices``; ``sizes``: the
    ``files`` listing, for the newest log's size), a new base file for each new group
    (``route.rewrite_tasks``'s keywords in ``common``)."""
    new_groups = rewrite_tasks(targets, {}, **common)
    tasks: list[RewriteTask | AppendTask] = []
    for n, ((partition, file_id), rewrite) in enumerate(zip(targets, new_groups, strict=True)):
        piece = slices.get(partition, {}).get(file_id)
        if piece is None:
            tasks.append(rewrite)
            continue
        last = piece.logs[-1] if piece.logs else None
        tasks.append(
            AppendTask(
                root=common["root"],
                storage=common["storage"],
                partition=partition,
                file_id=file_id,
                base_file=piece.base,
                previous_log=last,
                previous_size=sizes[partition][last] if last is not None else 0,
                instant=common["time"],
                write_token=f"{n}-0",
                schema=common["schema"],
                stats_columns=[name for name, _, _ in common["schema"]],
            )
        )
    return tasks


def write_tasks(
    targets: Sequence[tuple[str, str]],
    listing: Mapping[str, Mapping[str, str]],
    files: Mapping[str, Mapping[str, int]],
    merge_on_read: bool,
    **common: Any,
) -> list[RewriteTask | AppendTask]:
    """One task per target file group, for either engine: a rewrite of its base file
    (``listing``: partition -> file id -> base), or in a merge-on-read table an append to its
    slice (``files``: the ``files`` listing, name -> size)."""
    if merge_on_read:
        return merge_on_read_tasks(targets, current_slices(files), files, **common)
    return list(rewrite_tasks(targets, listing, **common))


class TaskSet(msgspec.Struct, frozen=True):
    """The tasks of one write keyed by ``<partition>\x00<file id>``, by kind (plain data for
    Spark executors)."""

    rewrites: dict[str, RewriteTask] = {}
    appends: dict[str, AppendTask] = {}

    @classmethod
    def of(cls, tasks: Sequence[RewriteTask | AppendTask]) -> TaskSet:
        rewrites = {f"{t.partition}\x00{t.file_id}": t for t in tasks if isinstance(t, RewriteTask)}
        appends = {f"{t.partition}\x00{t.file_id}": t for t in tasks if isinstance(t, AppendTask)}
        return cls(rewrites, appends)

    def run(self, name: str, rows: pa.Table, *, sync: bool = True, attempt: int = 0) -> WriteStatus:
        """Write one group's ``rows`` (an append's carry ``_braid_in_group``). ``attempt``: the
        Spark task attempt writing it, the second part of its file's write token
        (``<task number>-<attempt>``), so two attempts of one task never write one path: a
        retried or zombie attempt cannot cut or replace the file another attempt wrote and a
        commit named. The commit names the files of the statuses it received; the others'
        are marked, and removed by the marker sweep (``writers.services.markers``)."""
        append = self.appends.get(name)
        if append is not None:
            return append_to_file_group(_attempted(append, attempt), rows, sync=sync)
        return rewrite_file_group(_attempted(self.rewrites[name], attempt), rows, sync=sync)

    def run_all(
        self, groups: Sequence[tuple[str, pa.Table]], attempt: int = 0
    ) -> list[WriteStatus]:
        """:meth:`run` of each (name, rows) of ``groups`` in turn (a Spark rewrite task's
        groups), the written files made durable together before it returns
        (``timeline.durable.sync_new_files``: each file and each distinct folder fsynced once,
        on threads); a failed fsync raises, so the task fails and nothing is committed."""
        statuses = [self.run(name, rows, sync=False, attempt=attempt) for name, rows in groups]
        written = [s for s in statuses if s.file_name is not None]
        if written:
            first = self.appends.get(groups[0][0]) or self.rewrites[groups[0][0]]
            fs, root = filesystem(first.root, first.storage)  # one table's tasks
            layout = TableLayout(root)
            sync_new_files(fs, [layout.data_file(s.partition, s.file_name) for s in written])
        return statuses


TaskT = TypeVar("TaskT", RewriteTask, AppendTask)


def _attempted(task: TaskT, attempt: int) -> TaskT:
    """``task`` writing under the token of ``attempt`` (0: as planned)."""
    if not attempt:
        return task
    number = task.write_token.split("-", 1)[0]
    return msgspec.structs.replace(task, write_token=f"{number}-{attempt}")
