"""Errors of the metadata package.

* :class:`MetadataError` -- base of every error the package raises.
* :class:`MetadataValueError` / :class:`MetadataTypeError` -- a value or type handed to the
  package breaks its rules (also ``ValueError`` / ``TypeError``, as callers may expect).
* :class:`MetadataFormatError` -- a record, block or file is well formed (its checksum holds)
  but has a version, codec or kind this lakebraid does not support.
* :class:`CorruptLogBlockError` -- a log block is damaged (bad magic, unsupported or flipped
  format version, truncation, inconsistent lengths, CRC mismatch, undecodable header or body).
  Corruption is never skipped silently: the error names the file and the byte offset where the
  damaged block starts, and says what to do about it.
* :class:`CorruptBaseFileError` -- a metadata base file (Parquet) is damaged (page checksum,
  footer, row-group note or decoded rows); names the file and says what to do about it.
* :class:`StorageReadError` -- reading a file failed in the store or on the way (a 5xx, a
  throttling reply, a dropped connection), not in the file: nothing is damaged; retry.
"""

from __future__ import annotations

from lakebraid.timeline.errors import LakebraidError


class MetadataError(LakebraidError):
    """Base of the metadata package's errors."""


class MetadataValueError(MetadataError, ValueError):
    """A value handed to the metadata package breaks its rules (a key, a file id, a group
    count, a record that does not fit its partition); also a ``ValueError``."""


class MetadataTypeError(MetadataError, TypeError):
    """A value of the wrong type handed to the metadata package; also a ``TypeError``."""


class MissingMetadataFileError(MetadataError, FileNotFoundError):
    """A metadata file a read needs is gone (a concurrent clean removed it, or the table is
    damaged); also a ``FileNotFoundError`` naming the file (``filename``), so callers treat it
    as any vanished file."""

    def __init__(self, message: str, *, path: str, table: str | None = None):
        super().__init__(message, table=table)
        self.filename = path


class MetadataFormatError(MetadataError):
    """A metadata record, block or file has a version this lakebraid does not support."""


class CorruptLogBlockError(MetadataError):
    """A log block is damaged.

    ``path`` is the log file, ``offset`` the byte offset where the damaged block starts (when
    walking a file backwards through a damaged trailer the start is unknowable; the offset is
    then that of the trailer, and the message says so). ``message`` says what is wrong.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str,
        offset: int,
        table: str | None = None,
        instant: str | None = None,
    ):
        self.path = path
        self.offset = offset
        self.reason = message
        culprit = f"instant {instant}" if instant is not None else "the instant that wrote it"
        super().__init__(
            f"corrupt metadata log block in {path} at byte offset {offset}: {message}; "
            f"the log file is damaged: restore it from a backup or roll back {culprit}",
            table=table,
            instant=instant,
        )


class CorruptBaseFileError(MetadataError):
    """A metadata base file is damaged. ``path`` is the file, ``reason`` what was found."""

    def __init__(self, path: str, reason: str, *, table: str | None = None):
        self.path = path
        self.reason = reason
        stem = path.rsplit("/", 1)[-1].removesuffix(".parquet")
        instant = stem.rsplit("_", 1)[-1]
        known = instant.isdigit() and len(instant) == 17
        culprit = f"instant {instant}" if known else "the compaction that wrote it"
        super().__init__(
            f"corrupt metadata base file {path}: {reason}; it was written by {culprit}: "
            f"restore the file from a backup, or restore the table to a savepoint older than "
            f"that instant",
            table=table,
            instant=instant if known else None,
        )


class StorageReadError(MetadataError, OSError):
    """Reading ``path`` failed in the store or the network, not in the file's bytes (also an
    ``OSError``): never reported as corruption; the read is safe to retry."""

    def __init__(self, path: str, cause: BaseException, *, table: str | None = None):
        self.filename = path
        super().__init__(
            f"reading {path} failed in the storage ({type(cause).__name__}: {cause}); the file "
            "is not known to be damaged and nothing was changed: retry when the storage answers",
            table=table,
        )
