"""When a metadata file group's logs are folded into a new base (inline, after a commit).

A group is due when its logs reach ``metadata.compact.max.log.files`` files or
``metadata.compact.max.log.bytes`` bytes **and** hold ``metadata.compact.log.ratio`` times as
many entries as its base (a base under ``metadata.compact.small.base.bytes`` bytes and
``metadata.compact.small.base.entries`` entries does not wait for the ratio); or, whatever its
base, when they reach ``metadata.compact.hard.log.files`` files.

Entries, not bytes, because a rewrite costs per entry: keys that compress well (ids that grow)
make a base of 600,000 record-index entries 195 KB, a tenth of the bytes per entry of the logs
that feed it, so a ratio of bytes folded it every 8 appends (0.2 s each, growing with the
table). The base's count is its footer's; the logs' is estimated from their sizes at the
newest log's bytes per entry (its block headers: one log read, however many the group
holds). Both are read only for a group the count or byte limit makes a candidate and no
unseen commit base holds back; without them (:meth:`LogPolicy.due` given no counts) bytes stand in.

Why the ratio: a compaction rewrites the whole base. With a count rule alone, a group folded
every 8 commits costs its base's size every 8 commits, so the cost of each commit grows with
the table (a record-index group of a million keys took 0.35 s to fold, every 8th append).
Waiting until the logs are a fraction of the base makes the rewrites per commit proportional to
what the commits wrote, not to the table. The hard limit bounds what a lookup reads: every log
file of a group is read (and cached) by lookups until the next compaction. A small base (the
``files`` and ``column_stats`` partitions of most tables, a young record index) costs little to
rewrite, so it folds at the count or byte limit: every read of the table's listing and
statistics then opens at most ``max.log.files`` logs of it instead of up to the hard limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import msgspec

from lakebraid.metadata import settings
from lakebraid.metadata.slices import FileSlice, MetadataFile
from lakebraid.timeline import config as cfg


class Entries(NamedTuple):
    """Entries (rows, records) of a file group's base and of its logs since that base."""

    base: int
    logs: int


class LogPolicy(msgspec.Struct, frozen=True):
    """The inline compaction rule (see the module doc); ``max_log_files`` 0: never due."""

    max_log_files: int
    max_log_bytes: int | None = None
    log_ratio: float = 0.0
    hard_log_files: int | None = None
    small_base_bytes: int = 0
    small_base_entries: int | None = None  # None: a small base is judged by bytes alone

    @classmethod
    def of(cls, options: cfg.Options) -> LogPolicy:
        """The table's rule, from its config."""
        return cls(
            max_log_files=options.get(settings.COMPACT_LOG_FILES),
            max_log_bytes=options.get(settings.COMPACT_LOG_BYTES),
            log_ratio=options.get(settings.COMPACT_LOG_RATIO),
            hard_log_files=options.get(settings.COMPACT_HARD_LOG_FILES),
            small_base_bytes=options.get(settings.COMPACT_SMALL_BASE_BYTES),
            small_base_entries=options.get(settings.COMPACT_SMALL_BASE_ENTRIES),
        )

    @property
    def inline(self) -> bool:
        return self.max_log_files != 0

    def due(
        self,
        piece: FileSlice,
        base_bytes: int,
        entries: Callable[[], Entries] | None = None,
    ) -> bool:
        """Whether ``piece``'s logs are folded, its base being ``base_bytes`` (0: none or
        unknown); ``entries`` gives the base's and the logs' entry counts, asked only when
        the count or byte limit is reached and the ratio decides (None: bytes stand in)."""
        count = len(piece.logs)
        if not count or not self.inline:
            return False
        if self.hard_log_files is not None and count >= self.hard_log_files:
            return True
        reached = count >= self.max_log_files or (
            self.max_log_bytes is not None and piece.log_bytes >= self.max_log_bytes
        )
        if not reached or not base_bytes or not self.log_ratio:
            return reached
        small = base_bytes < self.small_base_bytes  # by bytes; by entries too, if known
        if small and self.small_base_entries is None:
            return True
        counted = entries() if entries is not None else None
        if counted is None:
            return small or piece.log_bytes >= self.log_ratio * base_bytes
        if small and counted.base < (self.small_base_entries or 0):
            return True
        return counted.logs >= self.log_ratio * counted.base


def base_bytes(listing: dict[str, list[MetadataFile]], piece: FileSlice) -> int:
    """The size of ``piece``'s base from its partition's listing (0: none, or not listed)."""
    found = (f.size for f in listing.get(piece.file_group, []) if f.name == piece.base)
    return next(found, 0)
