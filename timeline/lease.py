"""The table lock on object stores: a lease kept as a sequence of put-if-absent records.

Object stores have no file locks, no atomic rename and no append, but they create an object
only if its name is free (S3 ``If-None-Match: *``, 412 when taken) and list and read what
was written (strong read-after-write consistency). The lock is built from those two alone.

The records (``.braid/lease/<seq>.json``, format in ``timeline.lease_record``) say who holds
the lock, the last instant time issued and a decided completion not yet written. The newest
record (the highest ``seq``) is the lock's state. Every change, by anyone, is the creation of
record ``seq + 1`` with put-if-absent, so of two processes that read record ``n`` and act on
it, exactly one creates ``n + 1``; the other gets 412 and knows it.

Rules:

* **Acquire**: list the folder, read the newest record. Free (released, or no record): create
  the next record naming oneself. Held by another: wait; when the same record stays the
  newest for its ``lease_ms`` on the waiter's own monotonic clock (no clock is compared
  across machines), the holder is presumed dead and the waiter creates the next record
  naming itself (the break); the waiter counts from when its first sighting returned to when
  its latest look was sent, so a slow reply never stretches a holder's silence. A live holder
  renews every ``lease_ms / 3`` (a new record; after a failed renewal, again within a
  second), so its lease never stays unchanged that long.
* **Own changes landed unseen**: a refused create of the holder's next record whose body
  carries the holder's own ``token`` was its own earlier change (the reply was lost); the
  holder continues after it.
* **Fenced changes**: issuing an instant time and deciding a global completion are records
  the holder creates as ``seq + 1`` of the record it wrote last. If anyone else created that
  number first (a break while the holder was paused), the create fails with 412 and the
  holder raises :class:`LockLostError` (retryable: nothing of it was committed).
* **Commit point**: a global instant completes when the record carrying it in ``pending`` is
  created. The holder then writes the instant file (put-if-absent). A holder that dies in
  between leaves ``pending`` in the newest record, and whoever takes the lock next writes the
  file before anything else, so a decided completion is never lost and never doubled.
* **A paused holder**: whatever it does after its lease was broken fails at its next fenced
  change; its decided completions were carried forward by the breaker. A decision also lists
  the folder after its create: if a higher record exists, the decision stands only if the
  record after it carries it on (a breaker saw it as the newest) or its instant file exists;
  otherwise it was made in a number freed by the breaker's tidying, which no one builds on,
  and it fails. (A time issued in that case may repeat one the breaker issued: its instant
  files then meet put-if-absent, and nothing of it can complete.) When the store fails that
  check, or the instant file's write after a decision, the holder raises
  ``DecisionUnknownError``: the next holder writes the file of a decision that stands.
  Writes it makes that are not fenced (data files, requested or inflight instant files) are
  those of any pending instant: invisible until a completion, which it can no longer decide.

Old records are deleted by the holder, keeping the newest :data:`KEEP`, once every
:data:`TIDY_EVERY` records (a write makes about seven).
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import msgspec
from fsspec import AbstractFileSystem

from lakebraid.timeline.durable import create_settled, list_folder
from lakebraid.timeline.errors import (
    DecisionUnknownError,
    LakebraidError,
    LockLostError,
    LockTimeoutError,
    TimelineError,
)
from lakebraid.timeline.layout import TableLayout
from lakebraid.timeline.lease_record import (
    ENCODER,
    NAME,
    LeaseRecord,
    Pending,
    decode_record,
    record_name,
    record_seq,
)

KEEP = 8
TIDY_EVERY = 32
_ATTEMPTS = 4  # of a listing or a release record when the store fails
_MAX_WAIT_S = 0.2  # longest sleep between two looks at a held lock (a LIST and a GET each)
T = TypeVar("T")
_RENEW_RETRY_S = 1.0  # next try after a failed renewal (the store failed, not the lease)


class LeaseLock:
    """The table lock of an object-store table: reentrant within a thread, exclusive across
    threads, processes and machines while the holder renews its lease."""

    def __init__(
        self, fs: AbstractFileSystem, layout: TableLayout, timeout_s: float, lease_ms: int
    ):
        self.fs = fs
        self.layout = layout
        self.folder = layout.lease_dir
        self._timeout = timeout_s
        self._lease_ms = lease_ms
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        self._hold = threading.Lock()  # one holder thread in this process at a time
        self._guard = threading.Lock()  # one record written at a time (holder, renewer)
        self._local = threading.local()
        self._last: LeaseRecord | None = None  # the newest record this holder created
        self._written: Pending | None = None  # the pending completion whose file exists
        self._claimed = 0  # seq of the record that took the lock
        self._lost: LockLostError | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.holds = 0  # outermost acquisitions so far, by any thread of this process
        self._newest_mine: LeaseRecord | None = None  # the record this lock created last

    # ---- the lock protocol of TableLock ------------------------------------------------
    @property
    def held(self) -> bool:
        return getattr(self._local, "depth", 0) > 0

    def __enter__(self) -> LeaseLock:
        if not self.held:
            self._hold.acquire()
            try:
                self._acquire()
            except BaseException:
                self._hold.release()
                raise
            self.holds += 1
        self._local.depth = getattr(self._local, "depth", 0) + 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._local.depth -= 1
        if self._local.depth == 0:
            try:
                self._release()
            finally:
                self._hold.release()

    # ---- fenced changes (call while held) ------------------------------------------------
    @property
    def clock(self) -> str | None:
        """The last instant time issued, as the newest record says."""
        assert self._last is not None, "the lease lock is not held"
        return self._last.clock

    def advance_clock(self, issued: str) -> None:
        """Record ``issued`` as the last instant time issued, or raise LockLostError."""
        self._append(clock=issued)

    def decide(self, path: str, body: bytes) -> None:
        """Complete a global instant: the record carrying it is the commit point; then the
        instant file is written. LockLostError: nothing was decided. DecisionUnknownError:
        the store failed around the decision, which may stand (the next holder then writes
        its file) or not (recovery rolls the instant back)."""
        try:
            self._append(fenced=True, pending=Pending(path, body))
        except LakebraidError:
            raise
        except Exception as exc:
            raise self._unknown(path, exc, "whether it completed is unknown") from exc
        try:
            self._materialise()
        except TimelineError:
            raise
        except Exception as exc:  # create_settled's StateUnknownError too
            raise self._unknown(path, exc, "it completed; its file is not written") from exc

    def _unknown(self, path: str, exc: Exception, outcome: str) -> DecisionUnknownError:
        return DecisionUnknownError(
            f"deciding the completion {path} failed in the store ({type(exc).__name__}: "
            f"{exc}): {outcome}. The next holder of the table lock (the next write, or "
            "`lakebraid recover PATH`) writes the instant file of a decision that stands, "
            "and recovery rolls it back if it does not: do not retry the write",
            table=self.layout.root,
        )

    # ---- internals -------------------------------------------------------------------
    def _head(self) -> tuple[LeaseRecord | None, list[str]]:
        names = sorted(n for n in list_folder(self.fs, self.folder) if NAME.fullmatch(n))
        mine = self._newest_mine
        if names and mine is not None and names[-1] == record_name(mine.seq):
            return mine, names  # the newest is the record this lock created last: no GET
        for name in reversed(names):
            try:
                data = self.fs.cat_file(f"{self.folder}/{name}")
            except FileNotFoundError:  # deleted as old by the holder meanwhile
                continue
            return decode_record(data, f"{self.folder}/{name}"), names
        return None, names

    def _acquire(self) -> None:
        deadline = time.monotonic() + self._timeout
        seen: tuple[int, float] | None = None
        delay = 0.02
        while True:
            asked = time.monotonic()  # the listing shows the store at some moment after this
            head, _ = self._head()
            now = time.monotonic()  # ... and before this
            free = head is None or head.owner is None
            if not free and head is not None:
                if seen is None or seen[0] != head.seq:
                    seen = (head.seq, now)
                # unchanged from (at the latest) `seen` until (at the earliest) `asked`: a slow
                # reply never stretches the time a holder is presumed silent
                free = (asked - seen[1]) * 1000 >= head.lease_ms
            if free and self._claim(head):
                return
            if now >= deadline:
                raise LockTimeoutError(
                    f"could not take the table lock ({self.folder}) within {self._timeout} s; "
                    f"{head.owner if head else 'another writer'} holds it: retry, or raise "
                    "lock.timeout.seconds",
                    table=self.layout.root,
                )
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, _MAX_WAIT_S)

    def _claim(self, head: LeaseRecord | None) -> bool:
        record = LeaseRecord(
            seq=(head.seq + 1) if head else 0,
            owner=self._owner,
            token=uuid.uuid4().hex,
            lease_ms=self._lease_ms,
            clock=head.clock if head else None,
            pending=head.pending if head else None,
        )
        if not self._create(record):
            return False
        self._last, self._lost, self._claimed = record, None, record.seq
        self._newest_mine = record
        try:
            self._materialise()  # a decided completion of the previous holder first
        except BaseException:
            self._release()
            raise
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, daemon=True, name="lease-renewal")
        self._renewer.start()
        return True

    def _create(self, record: LeaseRecord) -> bool:
        path = f"{self.folder}/{record_name(record.seq)}"
        return create_settled(self.fs, path, ENCODER.encode(record))

    def _append(self, fenced: bool = False, **changes: object) -> LeaseRecord:
        """Create the record after this holder's last. ``fenced``: also list the folder
        afterwards; a higher record fails it unless a breaker carried it on (the name was
        free only because a breaker's tidy deleted it; see the module doc)."""
        with self._guard:
            last = self._last
            if self._lost is not None:
                raise self._lost
            assert last is not None, "the lease lock is not held"
            record = self._after(last, changes)
            while not self._create(record):
                own = self._own_record(record.seq)
                if own is None:
                    break
                # an earlier change of ours whose outcome was unknown did land: build on it
                self._last = self._newest_mine = own
                record = self._after(own, changes)
            else:
                stands = not fenced or self._stands(record)
                if stands or self._carried(record):  # carried: decided, by a breaker
                    self._last = self._newest_mine = record
                    if not stands:  # the lock was lost, the decision holds
                        self._lost = self._lost_error(record.seq)
                    return record
            self._lost = self._lost_error(record.seq)
            raise self._lost

    def _lost_error(self, seq: int) -> LockLostError:
        return LockLostError(
            f"the table lock's lease ({self.folder}, record {seq}) was taken over: this "
            f"writer paused longer than lock.lease.ms ({self._lease_ms}); nothing of this "
            "operation was committed: retry it",
            table=self.layout.root,
        )

    def _after(self, last: LeaseRecord, changes: dict[str, object]) -> LeaseRecord:
        """The record following ``last``; a pending completion stays until its file exists."""
        if last.pending is not None and last.pending is self._written:
            changes = {"pending": None, **changes}
        return msgspec.structs.replace(last, seq=last.seq + 1, **changes)

    def _own_record(self, seq: int) -> LeaseRecord | None:
        """Record ``seq`` when this acquisition created it (its token), else None."""
        path = f"{self.folder}/{record_name(seq)}"
        try:
            record = decode_record(self.fs.cat_file(path), path)
        except FileNotFoundError:
            return None
        token = self._last.token if self._last is not None else None
        return record if token is not None and record.token == token else None

    def _stands(self, record: LeaseRecord) -> bool:
        """Whether no higher record than the fenced ``record`` just created exists (see the
        module doc); the store's error when it keeps failing (the decision's fate unknown)."""
        names = self._settled(lambda: list_folder(self.fs, self.folder))
        return not any(NAME.fullmatch(n) and record_seq(n) > record.seq for n in names)

    def _carried(self, record: LeaseRecord) -> bool:
        """Whether an overtaken decision holds all the same: a breaker that saw ``record``
        as the newest carried its pending completion into the record after it (and wrote
        its file before anything else, so once that record is tidied the file shows it)."""
        if record.pending is None:
            return False
        after = f"{self.folder}/{record_name(record.seq + 1)}"
        pending = record.pending

        def read(path: str) -> bytes | None:
            try:
                return self.fs.cat_file(path)
            except FileNotFoundError:
                return None

        data = self._settled(lambda: read(after))
        if data is not None and decode_record(data, after).pending == pending:
            return True
        return self._settled(lambda: read(pending.path)) == pending.body

    def _settled(self, look: Callable[[], T]) -> T:
        """``look`` (a read, safe to repeat), retried when the store fails."""
        for attempt in range(_ATTEMPTS):
            try:
                return look()
            except Exception:
                if attempt == _ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _materialise(self) -> None:
        last = self._last
        if last is None or last.pending is None:
            return
        pending = last.pending
        if not create_settled(self.fs, pending.path, pending.body):  # retries on its own
            raise TimelineError(
                f"{pending.path} exists with a body other than the one its lease record "
                f"{last.seq} decided; the table's timeline was written outside lakebraid",
                table=self.layout.root,
            )
        self._written = pending  # the next record drops it

    def _renew(self) -> None:
        wait = self._lease_ms / 3000
        while not self._stop.wait(wait):
            try:
                self._append()
                wait = self._lease_ms / 3000
            except LockLostError:
                return
            except Exception:  # the store failed: try again soon, the lease keeps running
                wait = min(self._lease_ms / 3000, _RENEW_RETRY_S)

    def _release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        try:
            if self._lost is None and self._last is not None:
                record = self._released()
                if record is not None and record.seq // TIDY_EVERY > self._claimed // TIDY_EVERY:
                    self._tidy(record.seq)
        finally:
            self._last = None

    def _released(self) -> LeaseRecord | None:
        """The release record; None when the store keeps failing (or the lease was lost):
        the release never fails what the holder did, the lease then expires instead."""
        for attempt in range(_ATTEMPTS):
            try:
                return self._append(owner=None, token=None)
            except LockLostError:
                return None
            except Exception:
                time.sleep(0.05 * 2**attempt)
        return None

    def _tidy(self, newest: int) -> None:
        """Delete records older than the newest :data:`KEEP` (best effort)."""
        names = [n for n in list_folder(self.fs, self.folder) if NAME.fullmatch(n)]
        old = [f"{self.folder}/{n}" for n in names if record_seq(n) <= newest - KEEP]
        if old:
            try:
                self.fs.rm(old)
            except OSError:
                pass
