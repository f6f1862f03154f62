"""The commit model: what a write did (:class:`WriteStatus` per file group), the plan and the
metadata a commit's instant files carry (:class:`CommitPlan`, :class:`CommitMetadata`), and
the one reader of a commit body (:func:`read_commit`, version-checked) and the schema a
read point sees (:func:`schema_as_of`).

Format version 1, msgspec JSON in the instant files (``<t>.commit.requested``: CommitPlan;
``<t>.commit.inflight`` and ``<t>_<c>.commit``: CommitMetadata, whose statuses carry no key
lists). Write statuses travel from Spark tasks to the driver as msgpack; their key lists are
:func:`pack_keys` bytes (an Arrow IPC stream of one string column).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import msgspec
import pyarrow as pa

from lakebraid.metadata.arrow_records import flat
from lakebraid.metadata.hashing import parse_file_group_id
from lakebraid.metadata.stat_values import decode_stat_value, encode_stat_value
from lakebraid.metadata.writer import WrittenLog
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec
from lakebraid.timeline.timeline import Timeline

BODY_VERSION = 1


class ColumnStat(msgspec.Struct, frozen=True, array_like=True):
    column: str
    min_value: Any
    max_value: Any
    null_count: int
    value_count: int
    total_size: int


class WriteStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What one task did to one file group."""

    partition: str
    file_id: str
    file_name: str | None  # None: the group is now empty (no new file)
    old_file: str | None
    size: int = 0
    rows: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    stats: list[ColumnStat] = []
    # keys now in this group that were not before / that left it (deleted or moved away),
    # each as :func:`pack_keys` bytes; commit bodies keep them empty
    keys_added: bytes = b""
    keys_removed: bytes = b""
    crc32: int | None = None  # of the whole new file; None: written before it was recorded
    # merge-on-read: ``file_name`` is a log appended to the slice of this base (None: a
    # slice without base, or a copy-on-write status)
    base_file: str | None = None
    # merge-on-read: the log files a compaction folded into ``file_name`` (replaced, as
    # ``old_file`` is)
    old_logs: list[str] = []
    # merge-on-read: the slice's newest log that ``file_name`` was appended after (None: the
    # slice had none, or a copy-on-write status)
    previous_log: str | None = None

    def replaced(self) -> list[str]:
        """The files this status replaced: its old file, then the logs it folded."""
        return ([self.old_file] if self.old_file is not None else []) + list(self.old_logs)

    def built_on(self) -> list[str]:
        """The files of earlier commits this status relied on: those it replaced, the base of
        the slice it appended to and the log it appended after."""
        after = [f for f in (self.base_file, self.previous_log) if f is not None]
        return self.replaced() + after


class CommitPlan(msgspec.Struct, frozen=True, kw_only=True):
    version: int = BODY_VERSION
    operation: str


class CommitMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """What one write did (format.md section 6.1), counted from its write statuses and the
    metadata changes it logged, never estimated. A key that an upsert moved to another
    partition is one row updated (its old group counts a delete, its new one an insert)."""

    rows_inserted: int = 0  # keys the table did not hold before
    rows_updated: int = 0  # stored keys rewritten (moves included; older events are not)
    rows_deleted: int = 0  # keys removed from the table
    files_added: int = 0  # new data files
    files_removed: int = 0  # data files replaced (or emptied) by this commit
    bytes_written: int = 0  # bytes of the new data files
    metadata_bytes_written: int = 0  # bytes of the metadata log files written at the instant
    index_entries_written: int = 0  # record-index entries logged: upserts + deletes
    phases_ms: dict[str, int] = {}  # phase -> milliseconds (writers.commit.metrics.PHASES)


class CommitMetadata(msgspec.Struct, frozen=True, kw_only=True):
    version: int = BODY_VERSION
    operation: str
    statuses: list[WriteStatus] = []  # key lists dropped
    logs: list[WrittenLog] = []
    schema: list[FieldSpec] = []
    metrics: CommitMetrics | None = None  # None: written before metrics were recorded


_KEYS_SCHEMA = pa.schema([pa.field("key", pa.string())])
_KEYS_STREAM_HEAD = _KEYS_SCHEMA.serialize().to_pybytes()  # the stream's schema message
_STREAM_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # continuation marker, length 0


def pack_keys(keys: pa.Array) -> bytes:
    """Record keys as the bytes of an Arrow IPC stream (compact, no Python strings); no
    keys are empty bytes. The stream is its schema message, one record batch message and
    the end-of-stream marker, put together without a stream writer (a tenth of the time
    for a file's few keys; the same bytes) by one join: the message is copied once (333k
    keys: 0.5 ms; adding the three as bytes took 12 ms, each sum a fresh 5 MB copy)."""
    if len(keys) == 0:
        return b""
    text = keys if keys.type == pa.string() else keys.cast(pa.string())
    batch = pa.RecordBatch.from_arrays([text], schema=_KEYS_SCHEMA)
    return b"".join((_KEYS_STREAM_HEAD, batch.serialize(), _STREAM_END))


def unpack_keys(blob: bytes) -> pa.Array:
    """Inverse of :func:`pack_keys`; empty bytes are no keys. A stream of exactly the parts
    :func:`pack_keys` joins has its one batch read without a stream reader (8 against 21 us
    a status: a write of 5,000 partitions unpacks 5,000); any other stream is read whole."""
    if not blob:
        return pa.array([], pa.string())
    head, end = len(_KEYS_STREAM_HEAD), len(_STREAM_END)
    if blob[:head] == _KEYS_STREAM_HEAD and blob[-end:] == _STREAM_END:
        body = pa.py_buffer(blob).slice(head, len(blob) - head - end)
        return pa.ipc.read_record_batch(body, _KEYS_SCHEMA).column(0)
    table = pa.ipc.open_stream(blob).read_all()
    return flat(table.column(0))


class MetadataLogs(msgspec.Struct, frozen=True):
    """The body of a completed ``deltacommit``: the metadata files its commit wrote (its
    commit body's ``logs``), which a read point checks of the latest commit without decoding
    the commit body's statuses (a write of 5,000 partitions: a 2 MB body). ``logs`` None: a
    body written before deltacommits carried them (the commit body is read instead)."""

    version: int = BODY_VERSION
    logs: list[WrittenLog] | None = None


def latest_logs(
    table: TableTimelines, visible: Sequence[Instant], meta: Timeline
) -> tuple[Instant | None, dict[str, dict[str, int]]]:
    """The latest commit among ``visible`` and the metadata files it wrote, by metadata file
    group: file name -> bytes (its blocks' sizes summed); from its deltacommit on the
    metadata timeline ``meta``, else from its commit body."""
    latest = next((i for i in reversed(visible) if i.action is Action.COMMIT), None)
    if latest is None:
        return None, {}
    logs = _deltacommit_logs(table, meta, latest)
    if logs is None:
        logs = table.store.read_typed(TimelineKind.GLOBAL, latest, MetadataLogs).logs or []
    return latest, _by_group(logs)


RECENT_COMMITS = 8  # the newest visible commits whose metadata files every read point checks


def earlier_logs(
    table: TableTimelines, visible: Sequence[Instant], meta: Timeline
) -> dict[str, tuple[Instant, dict[str, dict[str, int]]]]:
    """The metadata files each of the :data:`RECENT_COMMITS` newest commits among ``visible``
    but the latest (:func:`latest_logs` gives its) wrote, by commit time: the commit and its
    files by file group (file name -> bytes), from its completed deltacommit (a small body,
    cached by the store). A commit whose deltacommit names no files (one written before
    deltacommits carried them) is left to ``validate()``, which reads commit bodies; so are
    older commits: a file group compacts after ``metadata.compact.max.log.files`` (8) logs, so
    an older commit's files are mostly folded into a base by then."""
    commits = (i for i in reversed(visible) if i.action is Action.COMMIT)
    found: dict[str, tuple[Instant, dict[str, dict[str, int]]]] = {}
    for inst in itertools.islice(commits, 1, RECENT_COMMITS):  # the latest is the first
        logs = _deltacommit_logs(table, meta, inst)
        if logs:  # (an old table's empty bodies: at most RECENT_COMMITS - 1 read)
            found[inst.time] = (inst, _by_group(logs))
    return found


def _deltacommit_logs(
    table: TableTimelines, meta: Timeline, commit: Instant
) -> list[WrittenLog] | None:
    """The ``logs`` of ``commit``'s completed deltacommit (None: none, or a body written
    before deltacommits carried them)."""
    delta = meta.get(commit.time, Action.DELTACOMMIT)
    if delta is None or not delta.is_completed:
        return None
    return table.store.read_typed(TimelineKind.METADATA, delta, MetadataLogs).logs


def checked_logs(
    table: TableTimelines,
    visible: Sequence[Instant],
    meta: Timeline,
    bases: Sequence[Instant],
    reindexed: dict[str, str],
) -> tuple[Instant | None, dict[str, dict[str, int]], dict[str, dict[str, dict[str, int]]]]:
    """What a read point checks the listings against: the latest commit among ``visible``
    and its metadata files (:func:`latest_logs`), and those of the commits before it
    (:func:`earlier_logs`), by commit time; each without the file groups of a partition
    that a reindex or index build among ``bases`` rebuilt after the commit (``reindexed``:
    partition -> its latest rebuild): the new bases hold what the commit recorded, and its
    old files may be gone."""

    def kept(written: dict[str, dict[str, int]], commit: Instant) -> dict[str, dict[str, int]]:
        after = {i.time for i in bases if i.completion_time > commit.completion_time}
        return {
            g: f
            for g, f in written.items()
            if reindexed.get(parse_file_group_id(g)[0]) not in after
        }

    latest, written = latest_logs(table, visible, meta)
    if latest is not None:
        written = kept(written, latest)
    earlier = {
        time: kept(logs, inst) for time, (inst, logs) in earlier_logs(table, visible, meta).items()
    }
    return latest, written, {t: logs for t, logs in earlier.items() if logs}


def _by_group(logs: Sequence[WrittenLog]) -> dict[str, dict[str, int]]:
    """Metadata files by file group: file name -> bytes (its blocks' sizes summed)."""
    written: dict[str, dict[str, int]] = {}
    for log in logs:
        files = written.setdefault(log.file_group, {})
        files[log.name] = files.get(log.name, 0) + log.size
    return written


def read_commit(table: TableTimelines, inst: Instant) -> CommitMetadata:
    """The body of a commit instant on the global timeline (version-checked; the error names
    the file)."""
    return table.store.read_typed(TimelineKind.GLOBAL, inst, CommitMetadata)


def data_groups(statuses: list[WriteStatus]) -> set[tuple[str, str]]:
    """The data file groups a commit rewrote, as (partition, file id)."""
    return {(s.partition, s.file_id) for s in statuses}


def schema_as_of(table: TableTimelines, as_of: str | None = None) -> list[FieldSpec]:
    """The table schema as of a read point: that of the latest visible commit."""
    for inst in reversed(table.visibility(as_of).visible):
        if inst.action is Action.COMMIT:
            body = read_commit(table, inst)
            if body.schema:
                return list(body.schema)
    return list(table.config.schema)


def encode_status(status: WriteStatus) -> bytes:
    """``status`` as msgpack bytes for a Spark task's result. Its statistics values take the
    metadata table's typed form (``stat_values.encode_stat_value``): plain msgpack would turn a
    date or a naive timestamp into text, and the column statistics would then hold text."""
    stats = [
        msgspec.structs.replace(
            c, min_value=encode_stat_value(c.min_value), max_value=encode_stat_value(c.max_value)
        )
        for c in status.stats
    ]
    return msgspec.msgpack.encode(msgspec.structs.replace(status, stats=stats))


def decode_status(data: bytes) -> WriteStatus:
    """Inverse of :func:`encode_status`."""
    status = msgspec.msgpack.decode(data, type=WriteStatus)
    stats = [
        msgspec.structs.replace(
            c, min_value=decode_stat_value(c.min_value), max_value=decode_stat_value(c.max_value)
        )
        for c in status.stats
    ]
    return msgspec.structs.replace(status, stats=stats)
