"""Inline table services: what a write runs after its commit point, each only when due.

1. Metadata compaction (``metadata.compact.max.log.files`` / ``metadata.compact.max.log.bytes``):
   file groups with enough log files or log bytes fold into new bases.
2. The record index's automatic resize (``metadata.record_index.auto.resize``,
   ``metadata.record_index.resize.factor``), checked when a compaction ran (the bases then hold
   the entry counts): a reindex to the estimate for the current entry count.
3. The cleaner (``clean.inline``, ``clean.inline.every.commits``): once that many commits
   completed since the latest clean (or since the table began), delete the file slices no
   retained read point needs (``writers.services.clean``, ``clean.retain.commits``).
4. Timeline archival (``archive.inline``, ``archive.max.instants``, ``archive.min.instants``):
   once the active global timeline holds more than the maximum, its oldest instants move into
   the archive (``timeline.archiver``).

Each service but archival is its own instant (archival commits by its manifest). A service
that fails never fails or undoes the write that ran it: the failure is logged (logger
``lakebraid``) and tried again when next due (the resize at the next inline compaction).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from lakebraid.index.reindex import resize_if_due
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.archiver import archive_if_due
from lakebraid.writers.services.clean import clean_if_due

LOG = logging.getLogger("lakebraid")
T = TypeVar("T")


def run_inline(metadata: MetadataTable, committed: str | None = None) -> dict[str, str]:
    """Run the due inline services after commit ``committed`` (None: after the latest);
    returns ``{service: instant}`` of those that ran."""
    ran: dict[str, str] = {}
    with metadata.table.store.load_scope():  # the checks share one listing per timeline
        _run_due(metadata, ran, committed)
    return ran


def _run_due(metadata: MetadataTable, ran: dict[str, str], committed: str | None) -> None:
    compaction = _attempt(metadata, "metadata compaction", metadata.compact_if_due)
    if compaction is not None:
        ran["compaction"] = compaction
        resized = _attempt(metadata, "record-index resize", lambda: resize_if_due(metadata))
        if resized is not None:
            ran["reindex"] = resized
    cleaned = _attempt(metadata, "clean", lambda: clean_if_due(metadata.table, committed))
    if cleaned is not None:
        ran["clean"] = cleaned
    archived = _attempt(metadata, "archival", lambda: archive_if_due(metadata.table))
    if archived is not None:
        ran["archive"] = archived.horizon


def _attempt(metadata: MetadataTable, name: str, service: Callable[[], T | None]) -> T | None:
    """``service()``, or None (logged) if it failed: the write that ran it already committed."""
    try:
        return service()
    except Exception as exc:
        LOG.warning("%s: inline %s failed (the write stands): %s", metadata.table.path, name, exc)
        return None
