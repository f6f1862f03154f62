"""Errors of the index package.

* :class:`IndexLayerError` -- base of every error the package raises.
* :class:`RecordKeyError` -- a record key (or a sequence of them) cannot be used: null, of a
  type whose text does not round-trip exactly, not convertible to the table's key type, or a
  bare string where a sequence of keys is expected. Raised before anything is written.
* :class:`ReindexConflictError` -- a reindex found record-index changes completed after its
  snapshot, or an undo that began before it completed; it did not complete (retryable).
* :class:`ReindexRunningError` -- a rollback or restore was refused because a reindex is
  running (it would fold the instants being undone); nothing changed (retryable).
* :class:`BloomFormatError` -- bytes or sizes that are not a key bloom filter
  (``index.bloom``).
* :class:`DamagedListingError` -- the metadata table lists two base files of one data file
  group (``index.file_groups.check_one_base``): a completion or a metadata log the table
  needs is missing; nothing was read or written.
* :class:`CorruptDataLogError` -- a merge-on-read data log block is damaged
  (``index.datalog``); names the file and the byte offset of the block.
"""

from __future__ import annotations

from lakebraid.timeline.errors import LakebraidError, RetryableError


class IndexLayerError(LakebraidError):
    """Base of the index package's errors."""


class RecordKeyError(IndexLayerError):
    """A record key is unusable; nothing was written."""


class ReindexConflictError(IndexLayerError, RetryableError):
    """A reindex did not complete: changes landed after its snapshot; run it again."""


class ReindexRunningError(IndexLayerError, RetryableError):
    """An undo was refused while a reindex runs; nothing changed: retry after it."""


class BloomFormatError(IndexLayerError):
    """Bytes or sizes that are not a key bloom filter of ``index.bloom``."""


class DamagedListingError(IndexLayerError):
    """The ``files`` listing names two base files of one file group: the table is damaged."""


class CorruptDataLogError(IndexLayerError):
    """A merge-on-read data log block is damaged (``index.datalog``): ``path`` is the log
    file, ``offset`` where the block starts, ``reason`` what the checks found."""

    def __init__(self, path: str, offset: int, reason: str, *, table: str | None = None):
        self.path, self.offset, self.reason = path, offset, reason
        super().__init__(
            f"corrupt data log block in {path} at byte {offset}: {reason}; restore the file "
            "from a backup, or roll back the commit that wrote it (or restore the table to a "
            "savepoint before it)",
            table=table,
        )
