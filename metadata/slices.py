"""File slices of the metadata table as a pure function of a partition folder's listing.

Files of a metadata partition (``timeline.layout`` builds the paths):

* ``<file group>_<instant>.parquet`` -- a base file written by the compaction (or bulk
  initialisation) instant ``<instant>``;
* ``<file group>_<instant>.log``     -- the log blocks written at data-table instant
  ``<instant>`` for that file group.

Names starting with ``.`` or ending in ``.inprogress`` are temporaries and ignored.

The slice of a file group as of a :class:`ReadPoint` is the newest visible base file (by
completion order of the compaction or reindex instant that wrote it) that folds no undone
instant, plus every log file whose data-table instant is visible and not folded into that
base, in completion order (the merge order: newest wins). A base that folded an instant later
rolled back is passed over for an older one, so reads stay exact until it is rewritten.

An undo (rollback or restore) of an instant that a reindex folded writes corrected bases for
that reindex's layout (``<group>_<base time>.parquet``, the reindex's rows without the undone
instants; ``ReadPoint.rebased``): they rank as the reindex itself, ahead of its own bases, so
the reindex's layout stays readable at every point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec
import numpy as np
import pyarrow as pa

from lakebraid.metadata.errors import MetadataError, MissingMetadataFileError
from lakebraid.metadata.hashing import file_groups_of, scoped_groups
from lakebraid.timeline.memo import memo


class ReadPoint(msgspec.Struct, frozen=True, weakref=True):
    """What a metadata reader may see; plain data, safe to send to Spark executors."""

    as_of: str | None
    visible: tuple[str, ...]  # data-table instants whose effects are visible, completion order
    undone: frozenset[str]  # instants undone by completed rollbacks / restores
    bases: tuple[str, ...]  # compaction / reindex instants whose bases are visible, in order
    group_counts: dict[str, int]  # metadata partition -> number of file groups
    reindexed: dict[str, str] = {}  # metadata partition -> its latest visible reindex instant
    rebased: dict[str, str] = {}  # corrected base time -> the visible reindex it stands in for
    secondary: dict[str, str] = {}  # indexed column -> the index build instant
    stats_columns: dict[str, str] = {}  # column with built statistics -> the build instant
    pending_indexes: tuple[str, ...] = ()  # index builds/drops pending (live or dead)
    read_at: str | None = None  # completion time of the latest visible instant
    scoped: bool = False  # the record index is partition-scoped (``index.scope``)
    spans: dict[str, list[int]] = {}  # scoped: data partition -> [first group, group count]
    # the latest visible commit and the metadata files it wrote, by file group (file name ->
    # bytes); groups of partitions rebuilt since are left out (:func:`lost_latest`)
    latest_commit: str | None = None
    latest_logs: dict[str, dict[str, int]] = {}
    # the same for the commits before it among the newest visible ones, by commit time
    # (``metadata.commits.earlier_logs``; :func:`lost_logs`)
    earlier_logs: dict[str, dict[str, dict[str, int]]] = {}

    def index_groups(
        self, keys: pa.Array | pa.ChunkedArray, hashes: np.ndarray | None = None
    ) -> np.ndarray:
        """The record-index file group of each index key in this layout
        (``metadata.hashing``: by hash, or by partition spans when scoped). ``hashes``: the
        keys' format hashes, when known (unscoped only: a scoped key's group also needs its
        partition's)."""
        n = self.group_counts["record_index"]
        if self.scoped:
            return scoped_groups(keys, n, self.spans)
        return file_groups_of(keys, n, hashes)


class MetadataFile(msgspec.Struct, frozen=True):
    name: str
    file_group: str
    instant: str
    kind: str  # "base" | "log"
    size: int = 0


class FileSlice(msgspec.Struct, frozen=True):
    file_group: str
    base: str | None  # file name, or None: the group starts empty
    base_instant: str | None
    logs: tuple[str, ...]  # file names in merge order (oldest completion first)
    log_instants: tuple[str, ...]
    folded: frozenset[str] = frozenset()  # instants the base already holds
    log_bytes: int = 0  # total size of the log files
    log_sizes: tuple[int, ...] = ()  # each log file's size, from the listing (0: unknown)

    def log_files(self) -> list[tuple[str, int | None]]:
        """(name, size or None when the listing gave none) of each log file, merge order."""
        sizes = self.log_sizes or (0,) * len(self.logs)
        return [(name, size or None) for name, size in zip(self.logs, sizes, strict=True)]


def parse_name(name: str, size: int = 0) -> MetadataFile | None:
    if name.startswith(".") or name.endswith(".inprogress"):
        return None
    stem, dot, ext = name.rpartition(".")
    if not dot or ext not in ("parquet", "log"):
        return None
    group, sep, instant = stem.rpartition("_")
    if not sep or len(instant) != 17 or not instant.isdigit():
        return None
    return MetadataFile(name, group, instant, "base" if ext == "parquet" else "log", size)


def group_files(names: Iterable[str | tuple[str, int]]) -> dict[str, list[MetadataFile]]:
    """Files by file group, from names or (name, size) pairs."""
    groups: dict[str, list[MetadataFile]] = {}
    for entry in names:
        parsed = parse_name(entry) if isinstance(entry, str) else parse_name(*entry)
        if parsed is not None:
            groups.setdefault(parsed.file_group, []).append(parsed)
    return groups


def visible_rank(point: ReadPoint) -> dict[str, int]:
    """Each visible instant's place in completion order (computed once per read point)."""
    return memo(point, "visible_rank", lambda: {t: n for n, t in enumerate(point.visible)})


def lost_latest(
    piece: FileSlice, files: Iterable[MetadataFile], point: ReadPoint
) -> dict[str, int]:
    """The files of ``piece``'s group that the latest visible commit wrote
    (``point.latest_logs``) and the listing ``files`` lacks (-1) or lists shorter than the
    commit recorded (their listed size; 0 may also be a store that lists no sizes), unless the
    slice's base folds that commit; empty: nothing is lost.

    A slice is a function of a listing, so a lost log would otherwise read as the table without
    the commit, with no error. :func:`lost_logs` applies this rule to the newest commits."""
    listed = {f.name: f.size for f in files}
    return _lost(piece, listed, point.latest_commit, point.latest_logs)


def lost_logs(
    piece: FileSlice, files: Iterable[MetadataFile], point: ReadPoint
) -> dict[str, tuple[str, int]]:
    """:func:`lost_latest`'s rule for the latest commit and each of ``point.earlier_logs``
    (the newest visible commits before it): per file lost, the commit that wrote it and its
    listed size. A commit the point no longer shows (a point as it will read once an undo
    completes, ``index.undo_points.with_undone``) is not checked: its files may be gone."""
    shown = visible_rank(point)
    listed = {f.name: f.size for f in files}
    commits = [(point.latest_commit, point.latest_logs), *point.earlier_logs.items()]
    return {
        name: (time, found)
        for time, logs in commits
        if time in shown
        for name, found in _lost(piece, listed, time, logs).items()
    }


def _lost(
    piece: FileSlice, listed: dict[str, int], commit: str | None, logs: dict[str, dict[str, int]]
) -> dict[str, int]:
    """The files ``commit`` wrote in ``piece``'s group (``logs``: by group, name -> bytes)
    that ``listed`` (name -> listed size) lacks (-1) or lists shorter, unless the slice's base
    folds the commit."""
    expected = logs.get(piece.file_group)
    if not expected or commit is None or commit in piece.folded:
        return {}
    found = {name: listed.get(name, -1) for name in expected}
    return {name: size for name, size in found.items() if size < expected[name]}


def recorded_size(point: ReadPoint, commit: str, group: str, name: str) -> int:
    """The bytes ``commit`` (one :func:`lost_logs` names) recorded for its file ``name``."""
    logs = point.latest_logs if commit == point.latest_commit else point.earlier_logs[commit]
    return logs[group][name]


def lost_error(
    point: ReadPoint, path: str, table: str, commit: str | None = None
) -> MissingMetadataFileError:
    """The error for a file :func:`lost_logs` found lost (``path``: where it belongs),
    written by ``commit`` (None: the latest visible commit)."""
    *_, partition, name = path.rsplit("/", 2)
    group = name.rsplit("_", 1)[0]
    time = commit if commit is not None else point.latest_commit or ""
    latest = time == point.latest_commit
    size = recorded_size(point, time, group, name)
    which = "the latest visible one" if latest else "one of the newest visible commits"
    return MissingMetadataFileError(
        f"metadata file {partition}/{name}, written by commit {time} ({which}), is missing "
        f"or shorter than the {size} bytes the commit recorded, and no base holds what it "
        "recorded: the read would return the table without that commit's changes. If a "
        "clean ran meanwhile, read again; otherwise restore the file from a backup, or roll "
        f"the commit back (lakebraid rollback PATH {time}) to go back to the table without "
        "it, or restore the table to a savepoint before it",
        path=path,
        table=table,
    )


def build_slice(
    file_group: str,
    files: Iterable[MetadataFile],
    point: ReadPoint,
    folded_of: Callable[[str], frozenset[str]],
) -> FileSlice:
    """The slice of one file group as of ``point``.

    ``folded_of(base file name)`` returns the instants a base file folds (read from its
    footer); it is called newest base first until one folds no undone instant. Bases of
    compactions and reindexes rank first; then *commit bases*: a record-index base a write
    made in a group that held no file at all (``metadata.writer``), named by the write's own
    instant and folding just it, visible when that instant is, ranked by its completion."""
    files = list(files)
    base_rank = {t: n for n, t in enumerate(point.bases)}
    base_rank.update({b: base_rank[r] for b, r in point.rebased.items() if r in base_rank})
    reindex = point.reindexed.get(file_group.rsplit("-", 1)[0])
    floor = base_rank[reindex] if reindex is not None else -1  # older layouts never count
    bases = sorted(
        (f for f in files if f.kind == "base" and base_rank.get(f.instant, -1) >= max(floor, 0)),
        key=lambda f: (base_rank[f.instant], f.instant),  # a correction after its reindex
        reverse=True,
    )
    log_rank = visible_rank(point)
    if reindex is None:  # after a reindex every group has a base: no commit base counts
        bases += sorted(
            (f for f in files if f.kind == "base" and f.instant in log_rank),
            key=lambda f: log_rank[f.instant],
            reverse=True,
        )
    base, folded = None, frozenset[str]()
    for candidate in bases:
        candidate_folded = folded_of(candidate.name)
        if not candidate_folded & point.undone:
            base, folded = candidate, candidate_folded
            break
    if base is None and reindex is not None:
        raise MetadataError(
            f"file group {file_group}: every base since reindex {reindex} folds an instant "
            f"undone later ({sorted(point.undone)}); its rows cannot be rebuilt from logs: "
            "run the reindex again"
        )
    logs = sorted(
        (f for f in files if f.kind == "log" and f.instant in log_rank and f.instant not in folded),
        key=lambda f: log_rank[f.instant],
    )
    return FileSlice(
        file_group=file_group,
        base=base.name if base else None,
        base_instant=base.instant if base else None,
        logs=tuple(f.name for f in logs),
        log_instants=tuple(f.instant for f in logs),
        folded=folded,
        log_bytes=sum(f.size for f in logs),
        log_sizes=tuple(f.size for f in logs),
    )
