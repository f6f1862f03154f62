"""The object-store table lock (timeline/lease.py) on a real S3-protocol server (moto on
loopback): record format, exclusion, a broken lease fencing its paused holder, a decided
completion carried forward by the next holder, and the clock across processes."""

from __future__ import annotations

import json
import time

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from table_fixtures import small_config

from lakebraid.timeline.errors import LockLostError, LockTimeoutError, TimelineError
from lakebraid.timeline.lease import TIDY_EVERY, LeaseLock
from lakebraid.timeline.lease_record import (
    LeaseRecord,
    Pending,
    decode_record,
    record_name,
)
from lakebraid.timeline.table import TableTimelines

times = st.from_regex(r"\d{17}", fullmatch=True)
records = st.builds(
    LeaseRecord,
    seq=st.integers(0, 10**19),
    owner=st.none() | st.text(max_size=40),
    token=st.none() | st.text(alphabet="0123456789abcdef", max_size=32),
    lease_ms=st.integers(1000, 10**7),
    clock=st.none() | times,
    pending=st.none() | st.builds(Pending, path=st.text(max_size=80), body=st.binary(max_size=300)),
)


@given(records)
def test_a_record_survives_its_round_trip(record):
    data = msgspec.json.encode(record)
    assert decode_record(data, "r") == record
    assert json.loads(data)["version"] == 1


def test_a_malformed_or_future_record_is_refused_by_name():
    with pytest.raises(TimelineError, match=r"lease record x/1\.json is malformed"):
        decode_record(b"{not json", "x/1.json")
    future = msgspec.json.encode({"version": 2, "seq": 1, "owner": None, "lease_ms": 1000})
    with pytest.raises(TimelineError, match=r"format version 2.*upgrade"):
        decode_record(future, "x/2.json")


def test_record_names_sort_as_numbers():
    names = [record_name(n) for n in (0, 9, 10, 99, 100, 10**12)]
    assert names == sorted(names)
    assert len({len(n) for n in names}) == 1


def _table(url: str, **options: object) -> TableTimelines:
    return TableTimelines.create(url, small_config("t"), options)


def _lock(table: TableTimelines, timeout_s: float = 5.0, lease_ms: int = 1000) -> LeaseLock:
    return LeaseLock(table.fs, table.layout, timeout_s, lease_ms)


def _pause(lock: LeaseLock) -> None:
    """Stop the holder's renewals, as a process paused by the OS or a long GC would."""
    lock._stop.set()
    assert lock._renewer is not None
    lock._renewer.join()


def test_an_s3_table_gets_the_lease_lock_and_a_second_holder_waits(s3_url):
    table = _table(s3_url())
    assert isinstance(table.lock, LeaseLock)
    first, second = _lock(table), _lock(table, timeout_s=1.5)
    with first:
        started = time.monotonic()
        with pytest.raises(LockTimeoutError, match="could not take the table lock"):
            with second:
                pass
        assert time.monotonic() - started >= 1.4  # waited, renewals kept the lease alive
    with second:  # released: free at once
        assert second.held


def test_a_paused_holder_is_fenced_after_its_lease_is_broken(s3_url):
    table = _table(s3_url())
    paused, other = _lock(table), _lock(table, timeout_s=10)
    path = f"{table.layout.timeline_dir('global')}/00000000000000001_00000000000000002.commit"
    paused.__enter__()
    clock = paused.clock
    _pause(paused)
    with other:  # breaks the lease once it stayed unchanged for lease_ms
        other.advance_clock("99999999999999998")
    with pytest.raises(LockLostError, match="taken over"):
        paused.advance_clock("99999999999999999")
    with pytest.raises(LockLostError):
        paused.decide(path, b"late")
    assert not table.fs.exists(path)  # nothing of the paused holder was decided
    with other:
        assert other.clock == "99999999999999998"  # the fenced clock never went back
    assert clock is None or clock < "99999999999999998"


def test_a_paused_holder_is_fenced_after_the_breaker_tidied_its_next_record(s3_url):
    """The breaker makes enough changes to delete old records: the paused holder's next
    record number is free again, and only the listing after its create fences it."""
    table = _table(s3_url())
    paused, other = _lock(table), _lock(table, timeout_s=10)
    path = f"{table.layout.timeline_dir('global')}/00000000000000001_00000000000000002.commit"
    paused.__enter__()
    _pause(paused)
    mine = paused._last.seq
    for n in range(2 * TIDY_EVERY):  # many acquisitions and changes; releases tidy
        with other:
            other.advance_clock(f"{90000000000000000 + n:017d}")
    names = table.fs.ls(table.layout.lease_dir, detail=False, refresh=True)
    assert not any(n.endswith(record_name(mine + 1)) for n in names)  # tidied: free again
    with pytest.raises(LockLostError, match="taken over"):
        paused.decide(path, b"late")
    assert not table.fs.exists(path)
    with other:
        assert other.clock == f"{90000000000000000 + 2 * TIDY_EVERY - 1:017d}"


def test_a_decided_completion_is_written_by_the_next_holder(s3_url):
    table = _table(s3_url())
    crashed, other = _lock(table), _lock(table, timeout_s=10)
    path = f"{table.layout.timeline_dir('global')}/00000000000000001_00000000000000002.commit"
    crashed.__enter__()
    crashed._append(pending=Pending(path, b"decided body"))  # dies before writing the file
    _pause(crashed)
    assert not table.fs.exists(path)
    with other:
        assert table.fs.cat_file(path) == b"decided body"
    with other:  # carried once: the next records no longer hold it
        assert other._last is not None and other._last.pending is None


def test_an_overtaken_decision_that_a_breaker_carried_on_stands(s3_url):
    """The holder paused between creating its decision and checking it: the breaker saw the
    decision as the newest record and carried it on, so it stands although the lock is lost."""
    table = _table(s3_url())
    paused, other = _lock(table), _lock(table, timeout_s=10)
    path = f"{table.layout.timeline_dir('global')}/00000000000000001_00000000000000002.commit"
    paused.__enter__()
    record = paused._append(pending=Pending(path, b"decided body"))  # not yet checked
    _pause(paused)
    with other:
        pass
    assert not paused._stands(record)  # a higher record exists: the breaker's
    assert paused._carried(record)
    unrelated = msgspec.structs.replace(record, pending=Pending(path + "x", b"other"))
    assert not paused._carried(unrelated)  # what the breaker carried is the decision itself


def test_a_decided_completion_whose_file_holds_other_bytes_is_reported(s3_url):
    table = _table(s3_url())
    crashed, other = _lock(table), _lock(table, timeout_s=10)
    path = f"{table.layout.timeline_dir('global')}/00000000000000001_00000000000000002.commit"
    crashed.__enter__()
    crashed._append(pending=Pending(path, b"decided body"))
    _pause(crashed)
    table.fs.pipe_file(path, b"something else")
    with pytest.raises(TimelineError, match="exists with a body other than"):
        with other:
            pass
    assert table.fs.cat_file(path) == b"something else"  # never overwritten


def test_instant_times_stay_unique_across_processes(s3_url, run_python):
    url = s3_url()
    _table(url)
    code = (
        "import sys; from lakebraid.timeline.table import TableTimelines as T\n"
        "t = T.open(sys.argv[1])\n"
        "print(' '.join(t.next_time() for _ in range(12)))\n"
    )
    procs = [run_python(code, url) for _ in range(3)]
    issued: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        mine = out.split()
        assert mine == sorted(mine) and len(mine) == 12
        issued += mine
    assert len(set(issued)) == len(issued) == 36


def test_old_records_are_tidied(s3_url):
    table = _table(s3_url())
    for _ in range(30):
        table.next_time()
    names = table.fs.ls(table.layout.lease_dir, detail=False, refresh=True)
    assert len(names) <= TIDY_EVERY + 8 + 2


def test_a_change_of_ours_that_landed_unseen_is_built_on_not_taken_for_a_break(s3_url):
    """A renewal whose reply never came (the store kept failing) may have created its record:
    the holder's next change finds its own token there and follows it."""
    table = _table(s3_url())
    lock = _lock(table)
    with lock:
        _pause(lock)  # no renewal of its own in between
        last = lock._last
        landed = msgspec.structs.replace(last, seq=last.seq + 1)
        assert lock._create(landed)  # landed, but the holder never heard
        lock.advance_clock("00000000000000042")
        assert lock._last.seq == last.seq + 2
        assert lock.clock == "00000000000000042"
    with _lock(table) as again:
        assert again.clock == "00000000000000042"


def test_a_record_of_another_acquisition_in_the_next_place_fences(s3_url):
    table = _table(s3_url())
    lock = _lock(table)
    with lock:
        _pause(lock)
        last = lock._last
        stranger = msgspec.structs.replace(last, seq=last.seq + 1, owner="x:1", token="other")
        assert lock._create(stranger)
        with pytest.raises(LockLostError, match="taken over"):
            lock.advance_clock("00000000000000042")
