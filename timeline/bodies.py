"""Instant bodies known to the timeline layer (format version 1, msgspec JSON).

Every body is a JSON object with a ``version`` field. This module holds every body type
made of plain values: the services' full plans (:class:`RollbackPlan`, :class:`RestorePlan`,
:class:`CleanPlan`, :class:`CompactionPlan`, :class:`ReindexPlan`, :class:`IndexPlan`) and the
views of them the timeline layer reads. Only the commit bodies, which carry write statuses
and metadata log files, live with those types (``metadata.commits``). The timeline layer
itself needs the bodies that decide visibility, read from *completed* rollback and restore
files:

* ``<t>_<c>.rollback``: ``{"version": 1, "target": "<instant time>", "target_action": "commit"}``
  -- the target instant is undone.
* ``<t>_<c>.restore``: ``{"version": 1, "target": "<instant time>"}`` -- every instant whose
  time lies strictly between ``target`` and ``t`` is undone, except rollbacks, restores and
  savepoints.

Both may carry ``"rebased": {"<reindex time>": "<base time>"}``: for each reindex that folded
an instant the undo removes, the time of the corrected record-index bases the undo wrote
(``<group>_<base time>.parquet``, the reindex's bases without the undone instants); from the
undo's completion on they stand in for that reindex's bases (``metadata.slices``).

and the ones that bound what a read point may reach (``timeline.as_of``):

* ``<t>_<c>.savepoint``: ``{"version": 1, "target": "<instant time>"}`` -- the cleaner keeps
  the files of the commit ``target``.
* ``<t>_<c>.clean``: ``{"version": 1, "earliest_retained": "<instant time>", ...}`` -- the
  cleaner kept what reads as of that commit's completion and later need (the full plan has
  more fields, read by the cleaner itself).

An empty body (zero bytes) is allowed for instants that carry nothing.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from lakebraid.timeline.errors import InstantFileError
from lakebraid.timeline.instant import Action

BODY_VERSION = 1
B = TypeVar("B", bound=msgspec.Struct)


class RollbackBody(msgspec.Struct, frozen=True, kw_only=True):
    version: int = BODY_VERSION
    target: str
    target_action: Action
    rebased: dict[str, str] = {}  # reindex time -> time of its corrected bases


class RestoreBody(msgspec.Struct, frozen=True, kw_only=True):
    version: int = BODY_VERSION
    target: str
    rebased: dict[str, str] = {}


class SavepointBody(msgspec.Struct, frozen=True, kw_only=True):
    version: int = BODY_VERSION
    target: str


class CleanBody(msgspec.Struct, frozen=True, kw_only=True):
    """The part of a clean plan that bounds read points (other fields are ignored here)."""

    version: int = BODY_VERSION
    earliest_retained: str


class RollbackPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A rollback's full plan (its requested and completed files): the files it deletes."""

    version: int = BODY_VERSION
    target: str
    target_action: Action
    data_files: list[str] = []  # paths relative to the table root
    logs: list[str] = []  # paths relative to the metadata folder
    rebased: dict[str, str] = {}  # reindex time -> time of its corrected bases


class RestorePlan(msgspec.Struct, frozen=True, kw_only=True):
    """A restore's full plan: the commits it undoes and the files it deletes."""

    version: int = BODY_VERSION
    target: str  # the savepointed instant the table returns to
    undone: list[str] = []  # the commits after it
    data_files: list[str] = []
    logs: list[str] = []
    rebased: dict[str, str] = {}


class CleanPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A clean's full plan: what it keeps from and the files it deletes."""

    version: int = BODY_VERSION
    earliest_retained: str
    data_files: list[str] = []  # relative to the table root
    metadata_files: list[str] = []  # relative to the metadata folder
    # where the next clean starts (completion times; "": the table's beginning): the commits
    # completed after ``scan_from`` name every data file this clean kept that a later one may
    # delete (written or replaced by them); undos completed up to ``swept_to`` were swept
    scan_from: str = ""
    swept_to: str = ""


class CompactionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A metadata compaction: the file groups it compacts and what each folds."""

    version: int = BODY_VERSION
    groups: list[str]
    # file group -> instants whose log files it folds (filled when inflight; bounded by the
    # group's logs: a base's footer lists all it holds)
    folded: dict[str, list[str]] = {}


class ReindexPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A reindex: the new file-group count of each metadata partition it rewrites, and for
    a partition-scoped record index the groups of each large data partition (``spans``:
    partition path -> [first group, group count]; ``metadata.hashing.scoped_groups``)."""

    version: int = BODY_VERSION
    group_counts: dict[str, int]
    spans: dict[str, list[int]] = {}


class IndexPlan(msgspec.Struct, frozen=True, kw_only=True):
    """An index build or drop (metadata timeline): which index, and the file-group count of
    the partition its bases rewrite (``secondary_index`` or ``column_stats``)."""

    version: int = BODY_VERSION
    op: str  # "build" | "drop"
    kind: str  # "secondary" | "column_stats"
    column: str = ""  # kind "secondary": the indexed column
    group_counts: dict[str, int] = {}
    columns: list[str] = []  # kind "column_stats": the columns whose statistics it adds/drops

    @property
    def label(self) -> str:
        """The columns it is about, for messages."""
        return ", ".join(repr(c) for c in (self.columns or [self.column]))


def encode_body(body: msgspec.Struct) -> bytes:
    return msgspec.json.encode(body)


class _Version(msgspec.Struct):
    """The field every body shares, read before the body is decoded as its type (the
    decoder skips the rest: a tenth of the time of a dict on a 2 MB commit body)."""

    version: object = BODY_VERSION


def decode_body(data: bytes, body_type: type[B], *, where: str) -> B:
    """Decode an instant body; ``where`` (table + file) goes into the error."""
    try:
        version = msgspec.json.decode(data or b"{}", type=_Version).version
        if version != BODY_VERSION:
            raise InstantFileError(
                f"{where}: body version {version!r} is not supported (this lakebraid reads "
                f"version {BODY_VERSION}); upgrade lakebraid"
            )
        return msgspec.json.decode(data or b"{}", type=body_type)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InstantFileError(
            f"{where}: damaged instant body ({exc}); restore the file from a backup "
            "(`validate()` lists every damaged body)"
        ) from None
