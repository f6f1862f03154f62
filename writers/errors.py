"""Errors of the write client.

* :class:`WriteError` -- base of the package's errors.
* :class:`InputError` -- the data handed to a write is unusable (null keys, a missing key or
  partition column, a column whose type differs from the table's); raised before anything is
  written, so the table is unchanged.
* :class:`WriteConflictError` -- a concurrent writer committed overlapping file groups first;
  this write was rolled back: retry it (a :class:`timeline.errors.RetryableError`).
* :class:`VanishedFileError` -- a file a read needed was removed while it ran (a
  concurrent clean); read again (a :class:`timeline.errors.RetryableError`).
* :class:`CorruptDataFileError` -- a data file of the table is damaged (a page checksum, the
  footer or the decoded data does not hold); names the file and says what to do.
* :class:`CorruptDataLogError` -- a merge-on-read data log block is damaged; names the file
  and the byte offset of the block (``index.errors``' own, as the log format is the index
  package's: re-exported here, where the client's other data-file errors are).
* :class:`MissingDataFileError` -- a data file the table lists is not on storage (the table is
  damaged; not retryable); names the file and says what to do.
* :class:`LostCompletionError` -- a commit that looks unfinished had completed (a later commit
  replaced a file it wrote): its completion file was lost; nothing was rolled back (a
  :class:`timeline.errors.StateUnknownError`: do not clean up by hand).
"""

from __future__ import annotations

from lakebraid.index.errors import CorruptDataLogError as CorruptDataLogError
from lakebraid.timeline.errors import LakebraidError, RetryableError, StateUnknownError


class WriteError(LakebraidError):
    """Base of the write client's errors."""


class InputError(WriteError):
    """The input of a write is invalid; nothing was written."""


class WriteConflictError(WriteError, RetryableError):
    """A concurrent commit touched the same file groups first; this write was rolled back
    and nothing of the other writer was touched: safe to retry."""


class VanishedFileError(WriteError, RetryableError):
    """A file of the read point was removed while the read ran (a concurrent clean passed
    the read point, whose files are older than the retention): read again."""


class ConflictDetected(WriteError):
    """Raised inside the commit protocol when the conflict check fails (the client turns it
    into :class:`WriteConflictError` after rolling its own instant back)."""

    def __init__(self, message: str, *, others: list[str], table: str, instant: str):
        super().__init__(message, table=table, instant=instant)
        self.others = others


class CorruptDataFileError(WriteError):
    """A data file is damaged. ``path`` is the file, ``reason`` what pyarrow or the integrity
    checks (``metadata.integrity``) found."""

    def __init__(self, path: str, reason: str, *, table: str | None = None):
        self.path = path
        self.reason = reason
        instant = path.rsplit("_", 1)[-1].removesuffix(".parquet")
        culprit = f"commit {instant}" if instant.isdigit() and len(instant) == 17 else "it"
        super().__init__(
            f"corrupt data file {path}: {reason}; restore the file from a backup, or roll "
            f"back the {culprit} that wrote it (or restore the table to a savepoint before "
            f"it); `validate()` lists every damaged file",
            table=table,
            instant=instant if culprit != "it" else None,
        )


class MissingDataFileError(WriteError):
    """A data file the table lists (at the read point) is not on storage: the table is
    damaged, and reading or writing again would meet the same gap."""

    def __init__(self, path: str, *, table: str | None = None, doing: str = ""):
        self.path = path
        instant = path.rsplit("_", 1)[-1].split(".")[0]
        culprit = f"commit {instant}" if instant.isdigit() and len(instant) == 17 else "it"
        super().__init__(
            f"data file {path}, which the table lists, is missing from storage{doing}; "
            f"restore the file from a backup, or roll back the {culprit} that wrote it (or "
            "restore the table to a savepoint before it); `validate()` lists every missing file",
            table=table,
            instant=instant if culprit != "it" else None,
        )


class LostCompletionError(WriteError, StateUnknownError):
    """A pending commit that later commits built on: its completion file was lost; it was not
    rolled back (``writers.services.rollback.check_not_built_upon``)."""
