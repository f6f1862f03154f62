"""The envelope of every write, whichever engine runs it: begin, write, commit
(``writers.commit.transaction``); on a conflict or a failure before the commit point, roll
the write's own instant back at once; when the commit point's outcome is unknown, leave it to
recovery; then the inline table services. Between the durable global requested instant and
the commit point the write's local fsyncs are owed and paid all at once just before the
commit point (``timeline.owed``)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from concurrent import futures

from lakebraid.metadata.commits import WriteStatus
from lakebraid.metadata.files import local_path
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.errors import RetryableError, StateUnknownError
from lakebraid.timeline.instant import Action
from lakebraid.timeline.owed import owing
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import FieldSpec
from lakebraid.writers.commit import ahead
from lakebraid.writers.commit.metrics import PhaseClock
from lakebraid.writers.commit.transaction import G, Transaction
from lakebraid.writers.errors import ConflictDetected, MissingDataFileError, WriteConflictError
from lakebraid.writers.services.inline import run_inline
from lakebraid.writers.services.markers import sweep_committed
from lakebraid.writers.services.rollback import rollback


def run_write(
    table: TableTimelines,
    metadata: MetadataTable,
    operation: str,
    read_at: str | None,
    schema: Sequence[FieldSpec],
    write: Callable[[str], list[WriteStatus] | ahead.TaskWrite],
    started: float | None = None,
    entries: ahead.Entries | None = None,
) -> str:
    """The envelope of every write, whichever engine runs ``write`` (instant time -> write
    statuses): begin, write, commit; on a conflict roll this write back and raise
    :class:`WriteConflictError`; on any other failure roll it back at once (``write`` may
    also return the record-index files its tasks wrote: ``commit.ahead.TaskWrite``). Then the inline
    services when due (``writers.services.inline``). Returns the instant time. ``started``:
    when the engine began (``time.perf_counter()``), the start of the ``prepare`` phase.
    ``entries``: the record-index entries of a write that only inserts new keys, computed and
    written beside ``write`` (``writers.commit.ahead``)."""
    tx = Transaction(table, metadata, operation, read_at, PhaseClock(started))
    try:
        with owing(local_path(table.fs, table.layout.root)):  # paid before the commit point
            time = tx.begin()  # its global requested instant durable at once, the rest owed
            statuses, written = _written(tx, write, entries)
            tx.clock.lap("write")
            _finish(tx, statuses, schema, written)
    except BaseException as exc:
        if tx.time is None:  # begin failed: its global requested instant is recovery's
            raise
        _abandon(tx, exc)
        if isinstance(exc, FileNotFoundError) and _replaced(metadata, exc):
            raise WriteConflictError(
                f"{exc.filename}, which this write read, was replaced by a concurrent commit "
                "and cleaned meanwhile; this write was rolled back: retry it",
                table=table.path,
                instant=time,
            ) from exc
        if isinstance(exc, FileNotFoundError) and exc.filename:  # listed, yet not on storage
            doing = "; this write was rolled back"
            raise MissingDataFileError(str(exc.filename), table=table.path, doing=doing) from exc
        raise
    run_inline(metadata, time)  # never fails the write: a failed service is logged, retried later
    return time


def _replaced(metadata: MetadataTable, missing: FileNotFoundError) -> bool:
    """Whether a file a write found missing has left the table (a concurrent commit replaced
    it and a clean removed it since the write planned), not a file the table still lists."""
    name = posixpath.basename(str(missing.filename or ""))
    listing = metadata.reader().files() if name else {}
    return bool(name) and all(name not in files for files in listing.values())


def _written(
    tx: Transaction,
    write: Callable[[str], list[WriteStatus] | ahead.TaskWrite],
    entries: ahead.Entries | None,
) -> tuple[list[WriteStatus], ahead.IndexAhead | ahead.IndexByTasks | None]:
    """The write's statuses, and its record-index blocks when ``entries`` are known ahead
    (written meanwhile on their own thread, which has finished whenever this returns or
    raises: no file of the write appears after its rollback) or its tasks wrote them."""
    assert tx.time is not None
    if entries is None:
        done = write(tx.time)
        return (done.statuses, done.index) if isinstance(done, ahead.TaskWrite) else (done, None)
    blocks = ahead.start(tx.metadata, tx.time, entries)
    try:
        statuses = write(tx.time)
    except BaseException:
        futures.wait([blocks])  # its own failure, if any, is not the one to raise
        raise
    if isinstance(statuses, ahead.TaskWrite):
        raise TypeError("a write whose tasks write its index has no entries known ahead")
    return statuses, blocks.result()


def _finish(
    tx: Transaction,
    statuses: list[WriteStatus],
    schema: Sequence[FieldSpec],
    written: ahead.IndexAhead | ahead.IndexByTasks | None = None,
) -> None:
    """Commit and sweep the markers, or on a conflict roll this write back and raise."""
    table = tx.table
    try:
        time = tx.commit(statuses, schema, written)
    except ConflictDetected as conflict:
        rollback(table, conflict.instant, own=True)  # type: ignore[arg-type]
        tx.close()  # the heartbeat goes last: until then no recovery takes us for dead
        raise WriteConflictError(
            f"{conflict.message}; this write was rolled back and nothing of theirs was "
            "touched: retry it",
            table=table.path,
            instant=conflict.instant,
        ) from None
    written = [f"{s.partition}/{s.file_name}".lstrip("/") for s in statuses if s.file_name]
    try:
        sweep_committed(table, time, written)
    except Exception:  # committed already: the cleaner sweeps what this left
        pass


def _abandon(tx: Transaction, exc: BaseException) -> None:
    """After a failure inside a write, roll its own instant back at once (its files and log
    blocks go, nothing stays pending). Not when the outcome is unknown or the global commit
    completed; if the rollback fails too, the heartbeat is left to expire and the next
    writer's recovery finishes it."""
    table, time = tx.table, tx.time
    if isinstance(exc, StateUnknownError) or tx.unknown:  # the heartbeat expires; recovery decides
        tx.close(failed=True)
        return
    pending = time is not None and not isinstance(exc, RetryableError)
    try:
        if pending:
            target = table.timeline(G).get(time, Action.COMMIT)  # type: ignore[arg-type]
            if target is not None and target.is_pending:
                rollback(table, time, own=True)  # type: ignore[arg-type]
        tx.close()
    except Exception:
        tx.close(failed=True)
