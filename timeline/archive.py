"""The timeline archive, format version 1: completed history moved out of the active timeline
folders, so that listing a timeline costs the same at commit 10 and at commit 10,000 (the
policy of what and when: ``timeline.archiver``).

Layout (``TableLayout.archive_dir``, ``.braid/archive/``)::

    manifest.<version>.json          the archive's commit point (version: 10 digits, from 1)
    <version>_<token>.parquet        archived instant files (token: 32 hex digits), written
                                     before the manifest that names them

A manifest is JSON::

    {"format_version": 1, "version": 3, "horizon": "20261123101500123",
     "files": [{"name": "0000000003_9f...e1.parquet", "level": 0, "rows": 180,
                "first": "20261123100000001", "last": "20261123101500123"}]}

``files`` cover disjoint ranges of instant times, ordered by ``first``; ``level`` counts how
many merges a file went through (``timeline.archiver`` merges files of one level);
``body_bytes`` (optional, 0 or absent when unknown) is the sum of its bodies' lengths, which
bounds what a merge holds in memory. An archive
Parquet file holds one row per archived instant file, sorted by (timeline, name):
``timeline`` (string: ``data``, ``metadata`` or ``global``), ``name`` (the instant file's
name, grammar of ``timeline.instant``) and ``body`` (binary: the file's bytes, unchanged).

Rules:

* The manifest with the highest version is the archive. It holds every instant file, of all
  three timelines, whose instant time is at or below its ``horizon``; the active folders hold
  the rest. An active file at or below the horizon is a leftover of an archival that stopped
  before deleting it: the same file is archived, and readers ignore the active copy.
* A manifest is created put-if-absent, never overwritten; files it names are never changed.
  Files and manifests that a newer manifest superseded are deleted after it is durable; a
  reader that loses one of them to that deletion reads the archive again.
* Readers list an active folder before the archive folder. The archiver writes the new
  manifest before it deletes the active files it archived, so a reader that missed a deleted
  active file finds the manifest that holds it.
* Before it deletes any active file, the archiver creates ``.archived.<version>`` (empty, a
  dot file: timelines skip it) in each of the three timeline folders, naming the manifest
  whose files it is about to delete, and afterwards deletes the older marks. A reader that
  already holds an archive snapshot at least that new needs no listing of the archive folder:
  a folder listing shows every active file not yet deleted, and a deleted one's mark (created
  before the deletion) names a manifest no newer than the one in hand. A reader's first load
  always reads the archive (an archive older than marks is found that way).
"""

from __future__ import annotations

import collections
import posixpath
import re
import uuid
from collections.abc import Iterable, Iterator, Sequence

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from lakebraid.timeline.durable import list_folder, make_durable, make_folder, put_if_absent
from lakebraid.timeline.errors import InstantFileError
from lakebraid.timeline.instant import Instant, is_valid_time, parse
from lakebraid.timeline.layout import TableLayout, TimelineKind
from lakebraid.timeline.timeline import Timeline

FORMAT_VERSION = 1
SCHEMA = pa.schema([("timeline", pa.string()), ("name", pa.string()), ("body", pa.binary())])
_MANIFEST_RE = re.compile(r"^manifest\.(\d{10})\.json$")
_FILE_RE = re.compile(r"^(\d{10})_[0-9a-f]{32}\.parquet$")
_RETRIES = 5
Row = tuple[TimelineKind, str, bytes]  # (timeline, instant file name, body)
TIME_DIGITS = 17  # an instant file's name starts with its time
ROW_GROUP_ROWS = 4096  # rows per row group of an archive file
MERGE_BATCH_ROWS = 1024  # rows a merge holds in memory at a time


class ArchiveFile(msgspec.Struct, frozen=True):
    name: str
    level: int
    rows: int
    first: str  # earliest instant time in the file
    last: str  # latest instant time in the file
    body_bytes: int = 0  # the bodies' bytes, uncompressed (0: unknown, an older manifest)


class Manifest(msgspec.Struct, frozen=True):
    format_version: int
    version: int
    horizon: str
    files: tuple[ArchiveFile, ...]


def manifest_name(version: int) -> str:
    return f"manifest.{version:010d}.json"


def file_name(version: int) -> str:
    """A new archive file's name: the manifest version that first names it, and a token."""
    return f"{version:010d}_{uuid.uuid4().hex}.parquet"


def encode_manifest(manifest: Manifest) -> bytes:
    return msgspec.json.encode(manifest)


def decode_manifest(data: bytes, *, where: str) -> Manifest:
    """A manifest, checked (:class:`InstantFileError` naming ``where`` if it is not one)."""
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except msgspec.DecodeError as exc:
        raise InstantFileError(f"{where} is not an archive manifest: {exc}") from None
    if manifest.format_version != FORMAT_VERSION:
        raise InstantFileError(
            f"{where} has archive format version {manifest.format_version}; this lakebraid "
            f"reads version {FORMAT_VERSION}: upgrade lakebraid to read this table"
        )
    problem = _manifest_problem(manifest)
    if problem is not None:
        raise InstantFileError(f"{where} is not a valid archive manifest: {problem}")
    return manifest


def _manifest_problem(manifest: Manifest) -> str | None:
    if manifest.version < 1 or not is_valid_time(manifest.horizon):
        return f"version {manifest.version} / horizon {manifest.horizon!r} out of range"
    previous = ""
    for entry in manifest.files:
        if not _FILE_RE.match(entry.name) or entry.rows < 1 or entry.level < 0:
            return f"file entry {entry.name!r} is malformed"
        if not (is_valid_time(entry.first) and is_valid_time(entry.last)):
            return f"file entry {entry.name!r} has invalid times"
        if not previous < entry.first <= entry.last <= manifest.horizon:
            return f"file {entry.name!r} overlaps another or passes the horizon"
        previous = entry.last
    return None


def encode_rows(rows: Iterable[Row]) -> pa.Table:
    ordered = sorted(rows, key=lambda row: (row[0].value, row[1]))
    return pa.table(
        [
            pa.array([r[0].value for r in ordered], pa.string()),
            pa.array([r[1] for r in ordered], pa.string()),
            pa.array([r[2] for r in ordered], pa.binary()),
        ],
        schema=SCHEMA,
    )


def read_archive_file(
    fs: AbstractFileSystem, path: str, columns: list[str] | None = None
) -> pa.Table:
    """An archive file's rows (``columns``: only those). Read through ``ParquetFile``, never
    ``pq.read_table``: that one scans a Python file object from Arrow's I/O threads, which
    then call into Python after the read returned, and a process exiting meanwhile aborts in
    native code ("terminate called without an active exception", apache/arrow#34314); and
    on the calling thread only (``use_threads=False``: no decoding thread reads the Python
    file: a process still aborted at exit in a full test run; archive files are small)."""
    with fs.open(path, "rb") as handle, pq.ParquetFile(handle) as parquet:
        return parquet.read(columns=columns, use_threads=False)


def decode_names(table: pa.Table, *, where: str) -> list[tuple[TimelineKind, Instant]]:
    """The instants of an archive file's ``timeline`` and ``name`` columns, checked."""
    if not table.schema.names[:2] == ["timeline", "name"]:
        raise InstantFileError(f"{where} is not an archive file (columns {table.schema.names})")
    found = []
    for kind_text, name in zip(
        table.column("timeline").to_pylist(), table.column("name").to_pylist(), strict=True
    ):
        try:
            kind = TimelineKind(kind_text)
        except ValueError:
            raise InstantFileError(f"{where}: unknown timeline {kind_text!r}") from None
        found.append((kind, parse(name, folder=where)))
    return found


class Snapshot(msgspec.Struct, frozen=True):
    """What the archive holds at one manifest (None: nothing archived yet)."""

    manifest: Manifest | None
    timelines: dict[TimelineKind, Timeline]

    @property
    def horizon(self) -> str | None:
        return self.manifest.horizon if self.manifest is not None else None

    @property
    def version(self) -> int:
        return self.manifest.version if self.manifest is not None else 0

    def holds(self, time: str) -> bool:
        return self.manifest is not None and time <= self.manifest.horizon

    def timeline(self, kind: TimelineKind) -> Timeline:
        return self.timelines.get(kind) or Timeline(kind, ())


EMPTY = Snapshot(None, {})
MARK = ".archived."


def mark_name(version: int) -> str:
    return f"{MARK}{version:010d}"


def marked_version(names: Iterable[str]) -> int:
    """The newest archive version a timeline folder's listing marks (0: none)."""
    found = [n[len(MARK) :] for n in names if n.startswith(MARK)]
    return max((int(v) for v in found if v.isdigit()), default=0)


# archive files are immutable (names carry a random token), so these caches never go stale;
# a manifest's name is its version alone: a snapshot is checked against the listing (_snapshot_at)
_NAMES: dict[str, list[tuple[TimelineKind, Instant]]] = {}
_SNAPSHOTS: dict[tuple[str, str, tuple[str, ...]], Snapshot] = {}
_BODIES: collections.OrderedDict[str, dict[tuple[str, str], bytes]] = collections.OrderedDict()
_BODY_FILES = 4  # archive files whose bodies stay in memory


class Archive:
    """Reads and writes one table's archive (see the module doc)."""

    def __init__(self, fs: AbstractFileSystem, layout: TableLayout):
        self.fs = fs
        self.folder = layout.archive_dir

    def path(self, name: str) -> str:
        return posixpath.join(self.folder, name)

    def listing(self) -> list[str]:
        return list_folder(self.fs, self.folder)

    def snapshot(self) -> Snapshot:
        """The archive now (the newest manifest); read again if a concurrent archival
        deleted what it named while it was read."""
        for attempt in range(_RETRIES):
            names = self.listing()
            manifests = sorted(n for n in names if _MANIFEST_RE.match(n))
            if not manifests:
                return EMPTY
            try:
                return self._snapshot_at(manifests[-1], set(names))
            except FileNotFoundError:
                if attempt == _RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _snapshot_at(self, name: str, listed: set[str]) -> Snapshot:
        """The snapshot of manifest ``name``; one read before is used again while every file
        it names is in the folder's ``listed`` names (a manifest's name is its version alone,
        so a table deleted and created again at the same path reuses it; the files' random
        tokens tell the tables apart)."""
        known = [
            key
            for key in _SNAPSHOTS
            if key[:2] == (self.folder, name) and listed.issuperset(key[2])
        ]
        if known:
            return _SNAPSHOTS[known[0]]
        path = self.path(name)
        manifest = decode_manifest(self.fs.cat_file(path), where=path)
        by_kind: dict[TimelineKind, list[Instant]] = {kind: [] for kind in TimelineKind}
        for entry in manifest.files:
            for kind, instant in self._names(entry.name):
                by_kind[kind].append(instant)
        snap = Snapshot(
            manifest, {k: Timeline.from_instants(k, found) for k, found in by_kind.items()}
        )
        if len(_SNAPSHOTS) >= 32:
            _SNAPSHOTS.clear()
        _SNAPSHOTS[(self.folder, name, tuple(f.name for f in manifest.files))] = snap
        return snap

    def _names(self, name: str) -> list[tuple[TimelineKind, Instant]]:
        path = self.path(name)
        known = _NAMES.get(path)
        if known is None:
            table = read_archive_file(self.fs, path, ["timeline", "name"])
            known = decode_names(table, where=path)
            if len(_NAMES) >= 1024:
                _NAMES.clear()
            _NAMES[path] = known
        return known

    def body(self, snap: Snapshot, kind: TimelineKind, instant: Instant) -> bytes:
        """The archived body of ``instant``'s file on the ``kind`` timeline."""
        assert snap.manifest is not None and snap.holds(instant.time)
        entry = next((f for f in snap.manifest.files if f.first <= instant.time <= f.last), None)
        bodies = self._bodies(entry.name) if entry is not None else {}
        found = bodies.get((kind.value, instant.file_name))
        if found is None:
            raise InstantFileError(
                f"{instant.file_name} of the {kind} timeline is at or below the archive's "
                f"horizon {snap.horizon} but not in the archive "
                f"({self.path(manifest_name(snap.version))})",
                instant=instant.time,
            )
        return found

    def _bodies(self, name: str) -> dict[tuple[str, str], bytes]:
        path = self.path(name)
        known = _BODIES.get(path)
        if known is None:
            table = read_archive_file(self.fs, path)
            known = {
                (kind, file): body
                for kind, file, body in zip(
                    table.column("timeline").to_pylist(),
                    table.column("name").to_pylist(),
                    table.column("body").to_pylist(),
                    strict=True,
                )
            }
            _BODIES[path] = known
            while len(_BODIES) > _BODY_FILES:
                _BODIES.popitem(last=False)
        _BODIES.move_to_end(path)
        return known

    # ---- writing (the archiver holds the table lock) ----------------------------------
    def write_file(
        self, version: int, level: int, batches: Iterable[pa.RecordBatch]
    ) -> ArchiveFile:
        """Write one archive file of ``batches`` (rows in :data:`SCHEMA`, in the order of a
        file's rows: :func:`encode_rows` or :meth:`merged`), one batch in memory at a time,
        durably, before any manifest names it."""
        name = file_name(version)
        make_folder(self.fs, self.folder)
        rows = size = 0
        first, last = "9" * TIME_DIGITS, ""
        with (
            self.fs.open(self.path(name), "wb") as handle,
            pq.ParquetWriter(handle, SCHEMA, compression="zstd") as writer,
        ):
            for batch in batches:
                if not batch.num_rows:
                    continue
                writer.write_batch(batch, row_group_size=ROW_GROUP_ROWS)
                times = pc.min_max(pc.utf8_slice_codeunits(batch.column(1), 0, TIME_DIGITS))
                first, last = min(first, times["min"].as_py()), max(last, times["max"].as_py())
                rows += batch.num_rows
                size += pc.sum(pc.binary_length(batch.column(2))).as_py() or 0
        make_durable(self.fs, self.path(name))
        return ArchiveFile(name, level, rows, first, last, size)

    def merged(self, entries: Sequence[ArchiveFile]) -> Iterator[pa.RecordBatch]:
        """The rows of ``entries`` (adjacent files, in order) in a file's row order, a batch
        at a time. Adjacent files cover disjoint, ordered time ranges and an instant file's
        name starts with its time, so each timeline's rows are its rows in each file, in file
        order: no sort, and memory holds one batch whatever the files' sizes."""
        for kind in sorted(k.value for k in TimelineKind):
            for entry in entries:
                with (
                    self.fs.open(self.path(entry.name), "rb") as handle,
                    pq.ParquetFile(handle) as parquet,
                ):
                    groups = _groups_holding(parquet.metadata, kind)
                    for batch in parquet.iter_batches(MERGE_BATCH_ROWS, row_groups=groups):
                        mine = batch.filter(pc.equal(batch.column(0), kind))
                        if mine.num_rows:
                            yield mine

    def commit(self, manifest: Manifest) -> None:
        """Create ``manifest`` put-if-absent: ``InstantExistsError`` if that version exists."""
        make_folder(self.fs, self.folder)
        put_if_absent(
            self.fs, self.path(manifest_name(manifest.version)), encode_manifest(manifest)
        )

    def remove_superseded(self, snap: Snapshot) -> int:
        """Delete manifests older than ``snap``'s and files it does not name (merged ones, or
        orphans of a run that stopped before its manifest). Only the archiver calls this,
        under the table lock, so no other archival is writing files meanwhile."""
        if snap.manifest is None:
            return 0
        named = {f.name for f in snap.manifest.files}
        removed = 0
        for name in self.listing():
            manifest = _MANIFEST_RE.match(name)
            if (manifest and int(manifest.group(1)) < snap.version) or (
                _FILE_RE.match(name) and name not in named
            ):
                self.fs.rm_file(self.path(name))
                removed += 1
        return removed


def _groups_holding(meta: pq.FileMetaData, kind: str) -> list[int]:
    """Row groups whose ``timeline`` statistics admit ``kind`` (all, without statistics): a
    file's rows are sorted by timeline, so a merge reads each row group about once."""
    found = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(0).statistics
        if stats is None or not stats.has_min_max or stats.min <= kind <= stats.max:
            found.append(i)
    return found
