"""The timeline archive: its format round trip, its checks, and archival as a state machine
whose timelines, bodies and as-of visibility never change when files move into the archive."""

from __future__ import annotations

import os
import tempfile

import msgspec
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from table_fixtures import small_config

from lakebraid.timeline.archive import (
    ArchiveFile,
    Manifest,
    decode_manifest,
    decode_names,
    encode_manifest,
    encode_rows,
)
from lakebraid.timeline.archiver import _window as archiver_window
from lakebraid.timeline.archiver import archive, plan_horizon
from lakebraid.timeline.bodies import RollbackBody, encode_body
from lakebraid.timeline.errors import IllegalTransitionError, InstantFileError
from lakebraid.timeline.instant import Action, Instant, State, millis_to_time
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.timeline import Timeline

G, D, M = TimelineKind.GLOBAL, TimelineKind.DATA, TimelineKind.METADATA
BASE_MS = 1_795_000_000_000


def t(n: int) -> str:
    return millis_to_time(BASE_MS + n)


# ---- the format ----------------------------------------------------------------------------
entries = st.lists(st.integers(1, 10_000), min_size=0, max_size=6, unique=True).map(sorted)


@settings(deadline=None)
@given(points=entries, version=st.integers(1, 10**9), level=st.integers(0, 9))
def test_manifest_round_trip(points: list[int], version: int, level: int) -> None:
    files = tuple(
        ArchiveFile(f"{version:010d}_{i:032x}.parquet", level, 1 + i, t(2 * p), t(2 * p + 1))
        for i, p in enumerate(points)
    )
    manifest = Manifest(1, version, t(2 * max(points, default=0) + 1), files)
    data = encode_manifest(manifest)
    assert decode_manifest(data, where="m") == manifest
    assert msgspec.json.decode(data)["horizon"] == manifest.horizon


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"format_version": 2}, "format version 2"),
        ({"version": 0}, "out of range"),
        ({"horizon": "2026"}, "out of range"),
        ({"files": [{"name": "x.parquet", "level": 0, "rows": 1, "first": "", "last": ""}]}, "x"),
    ],
)
def test_bad_manifest_names_the_file(change: dict[str, object], expected: str) -> None:
    good = msgspec.to_builtins(Manifest(1, 1, t(5), ()))
    with pytest.raises(InstantFileError, match=expected) as err:
        decode_manifest(msgspec.json.encode({**good, **change}), where="/t/manifest.x.json")
    assert "/t/manifest.x.json" in str(err.value)


def test_overlapping_files_refused() -> None:
    a = ArchiveFile(f"{1:010d}_{1:032x}.parquet", 0, 1, t(1), t(5))
    b = ArchiveFile(f"{1:010d}_{2:032x}.parquet", 0, 1, t(5), t(6))
    with pytest.raises(InstantFileError, match="overlaps"):
        decode_manifest(encode_manifest(Manifest(1, 1, t(6), (a, b))), where="m")
    with pytest.raises(InstantFileError, match="is not an archive manifest"):
        decode_manifest(b"{not json", where="m")


names = st.builds(
    lambda n, action, done: (
        Instant(t(n), action, State.COMPLETED, t(n + 1)).file_name
        if done
        else Instant(t(n), action, State.INFLIGHT).file_name
    ),
    st.integers(0, 10**6),
    st.sampled_from(list(Action)),
    st.booleans(),
)


@settings(deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(list(TimelineKind)), names, st.binary(max_size=64)),
        max_size=20,
        unique_by=lambda r: (r[0], r[1]),
    )
)
def test_rows_round_trip(rows: list[tuple[TimelineKind, str, bytes]]) -> None:
    table = encode_rows(rows)
    decoded = decode_names(table, where="f")
    assert sorted((k, i.file_name) for k, i in decoded) == sorted((k, n) for k, n, _ in rows)
    columns = [table.column(c).to_pylist() for c in ("timeline", "name", "body")]
    stored = {(k, n): b for k, n, b in zip(*columns, strict=True)}
    assert stored == {(k.value, n): b for k, n, b in rows}


# ---- the horizon -------------------------------------------------------------------------
def timeline(kind: TimelineKind, *instants: Instant) -> Timeline:
    return Timeline.from_instants(kind, instants)


def done(n: int, action: Action = Action.COMMIT) -> Instant:
    return Instant(t(n), action, State.COMPLETED, t(n))


def test_horizon_keeps_the_newest_and_stops_before_pending_work() -> None:
    commits = [done(n) for n in range(10)]
    plain = {G: timeline(G, *commits), M: timeline(M), D: timeline(D)}
    assert plan_horizon(plain, frozenset(), frozenset(), None, 3) == t(6)
    assert plan_horizon(plain, frozenset(), frozenset(), None, 10) is None
    assert plan_horizon(plain, frozenset(), frozenset(), t(6), 3) is None  # 3 left after t(6)
    stuck = Instant(t(4), Action.COMMIT, State.INFLIGHT)
    blocked = {**plain, G: timeline(G, *commits[:4], stuck, *commits[5:])}
    assert plan_horizon(blocked, frozenset(), frozenset(), None, 3) == t(3)
    assert plan_horizon(blocked, frozenset({t(4)}), frozenset(), None, 3) == t(6)  # undone
    reindex = Instant(t(2), Action.REINDEX, State.INFLIGHT)
    running = {**plain, M: timeline(M, reindex)}
    assert plan_horizon(running, frozenset(), frozenset({t(2)}), None, 3) == t(1)
    assert plan_horizon(running, frozenset(), frozenset(), None, 3) == t(6)  # dead: archived
    first = {**plain, G: timeline(G, Instant(t(0), Action.COMMIT, State.REQUESTED), *commits[1:])}
    assert plan_horizon(first, frozenset(), frozenset(), None, 3) is None


# ---- archival as a state machine ---------------------------------------------------------
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.sampled_from(["done", "pending", "global-only"])),
        st.tuples(st.just("rollback"), st.integers(0, 50)),
        st.tuples(st.just("compaction"), st.booleans()),
        st.tuples(st.just("archive"), st.integers(1, 6)),
    ),
    min_size=1,
    max_size=40,
)


class Model:
    """Drives a table's timelines directly through its store."""

    def __init__(self, table: TableTimelines) -> None:
        self.table, self.store = table, table.store
        self.commits: list[str] = []

    def commit(self, how: str) -> None:
        time = self.table.next_time()
        kinds = [G] if how == "global-only" else [G, D, M]
        for kind in kinds:
            self.store.request(kind, time, Action.COMMIT if kind is not M else Action.DELTACOMMIT)
        for kind in kinds:
            action = Action.COMMIT if kind is not M else Action.DELTACOMMIT
            self.store.start(kind, time, action, f"inflight {time}".encode())
        if how == "pending":
            return
        done_at = self.table.next_time()
        for kind in reversed(kinds):
            action = Action.COMMIT if kind is not M else Action.DELTACOMMIT
            self.store.complete(kind, time, action, f"done {time}".encode(), done_at)
        self.commits.append(time)

    def rollback(self, pick: int) -> None:
        pending = [i.time for i in self.table.timeline(G).pending() if i.action is Action.COMMIT]
        targets = pending + self.commits[-3:]
        if not targets:
            return
        target = targets[pick % len(targets)]
        time = self.table.next_time()
        body = encode_body(RollbackBody(target=target, target_action=Action.COMMIT))
        self.store.request(G, time, Action.ROLLBACK)
        self.store.start(G, time, Action.ROLLBACK)
        self.store.complete(G, time, Action.ROLLBACK, body)

    def compaction(self, complete: bool) -> None:
        time = self.table.next_time()
        self.store.request(M, time, Action.COMPACTION, b"plan")
        self.store.start(M, time, Action.COMPACTION, b"folded")
        if complete:
            self.store.complete(M, time, Action.COMPACTION, b"done")


def observe(table: TableTimelines) -> dict[str, object]:
    """Everything a reader can learn from the timelines: every instant file and its body,
    and the visible instants now and as of every completion time."""
    timelines = {kind: table.timeline(kind) for kind in TimelineKind}
    bodies = {
        (kind.value, f.file_name): table.store.read_body(kind, f)
        for kind, tl in timelines.items()
        for f in tl.all_files()
    }
    points = [None, *sorted(i.completion_time for i in timelines[G] if i.completion_time)]
    seen = {p: table.visibility(p).visible for p in points}
    instants = {kind: (tl.instants, tl.all_files()) for kind, tl in timelines.items()}
    return {"timelines": instants, "bodies": bodies, "as_of": seen}


def active_files(table: TableTimelines) -> int:
    """Instant files in the active folders (not the archive's dot-file marks)."""
    return sum(
        not name.startswith(".") for kind in TimelineKind for name in table.store.list_names(kind)
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
@example(ops=[("commit", "pending"), ("rollback", 0), ("archive", 1)])  # a rolled-back pending
def test_archival_changes_no_timeline_body_or_as_of_read(ops: list[tuple[str, object]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        table = TableTimelines.create(os.path.join(folder, "t"), small_config("t"))
        model = Model(table)
        for name, arg in ops:
            if name != "archive":
                getattr(model, name)(arg)
                continue
            before, files_before = observe(table), active_files(table)
            result = archive(table, keep=int(arg))  # type: ignore[call-overload]
            fresh = TableTimelines.open(table.path)  # a new reader, too
            assert observe(table) == before == observe(fresh)
            if result is not None:
                assert active_files(table) == files_before - result.files
                assert result.instants >= 1
        for name, arg in [("archive", 1), ("commit", "done"), ("archive", 1)]:
            if name == "commit":
                model.commit(str(arg))
            else:
                before = observe(table)
                archive(table, keep=int(arg))  # type: ignore[call-overload]
                assert observe(table) == before


def test_transition_of_an_archived_pending_instant_is_refused(new_table) -> None:
    table = new_table()
    model = Model(table)
    model.compaction(complete=False)  # a compaction still running when archival passes it
    running = next(i for i in table.timeline(M) if i.is_pending).time
    for _ in range(4):
        model.commit("done")
    assert archive(table, keep=1) is not None
    with pytest.raises(IllegalTransitionError, match="was archived"):
        table.store.complete(M, running, Action.COMPACTION, b"done")
    assert table.timeline(M).get(running).is_pending


def test_a_reader_finds_bodies_another_archival_merged_away(new_table) -> None:
    table = new_table(**{"archive.merge.files": 2})
    model = Model(table)
    for _ in range(4):
        model.commit("done")
    assert archive(table, keep=3) is not None
    reader = TableTimelines.open(table.path)  # sees the archive with one file
    first = reader.timeline(G).instants[0]
    for _ in range(4):
        model.commit("done")
    merged = archive(table, keep=3)  # a second file: merged with the first, both deleted
    assert merged is not None and merged.merged == 2
    assert reader.store.read_body(G, first) == f"done {first.time}".encode()


@pytest.mark.parametrize("archived_before", [0, 1, 2])
def test_a_reader_holding_an_older_archive_sees_what_another_process_archived(
    tmp_path, archived_before: int
) -> None:
    """A store reads the archive folder again only when a timeline folder marks a newer
    archive: instants made and archived after the reader's last load, even ones it never
    listed, are still in its timelines."""
    path = str(tmp_path / "t")
    writer = TableTimelines.create(path, small_config("t"))
    model = Model(writer)
    for _ in range(archived_before):
        for _ in range(4):
            model.commit("done")
        archive(writer, keep=1)
    reader = TableTimelines.open(path)
    first = {kind: list(reader.timeline(kind)) for kind in TimelineKind}
    for _ in range(6):  # new instants the reader never listed, then archived
        model.commit("done")
    assert archive(writer, keep=1) is not None
    fresh = TableTimelines.open(path)
    for kind in TimelineKind:
        assert list(reader.timeline(kind)) == list(fresh.timeline(kind))
        assert len(list(reader.timeline(kind))) > len(first[kind])
    assert reader.visibility().visible == fresh.visibility().visible


@pytest.mark.parametrize("cap", [1, 1 << 30])
def test_merges_stop_at_the_byte_cap_and_keep_every_body(new_table, cap: int) -> None:
    """Files whose bodies together pass ``archive.merge.max.bytes`` stay unmerged; merged or
    not, every archived body reads back, and each file records its bodies' bytes."""
    table = new_table(**{"archive.merge.files": 2, "archive.merge.max.bytes": cap})
    model = Model(table)
    archived: list[Instant] = []
    for _ in range(4):
        for _ in range(3):
            model.commit("done")
        before = [i for i in table.timeline(G) if i.is_completed]
        assert archive(table, keep=1) is not None
        archived = [i for i in before if table.store.seen_archive.holds(i.time)]
    manifest = table.store.archive.snapshot().manifest
    assert manifest is not None
    levels = sorted(f.level for f in manifest.files)
    assert levels == ([0, 0, 0, 0] if cap == 1 else [1, 1])
    reader = TableTimelines.open(table.path)
    for inst in archived:
        assert reader.store.read_body(G, inst) == f"done {inst.time}".encode()
    for entry in manifest.files:
        bodies = table.store.archive._bodies(entry.name)
        assert entry.body_bytes == sum(len(b) for b in bodies.values()) > 0
        assert entry.first == min(name[:17] for _, name in bodies)
        assert entry.last == max(name[:17] for _, name in bodies)


def _files(*specs: tuple[int, int]) -> tuple[ArchiveFile, ...]:
    """Adjacent archive files of (level, body bytes)."""
    return tuple(
        ArchiveFile(f"{1:010d}_{i:032x}.parquet", level, 1, t(2 * i), t(2 * i + 1), size)
        for i, (level, size) in enumerate(specs)
    )


@pytest.mark.parametrize(
    ("specs", "cap", "expected"),
    [
        ([(0, 10)] * 4, 100, (0, 4)),  # all fit
        ([(0, 10)] * 4, 30, (0, 3)),  # as many as fit
        ([(0, 60), (0, 60), (0, 10), (0, 10)], 100, (1, 3)),  # the front pair is too big
        ([(0, 60), (0, 60), (0, 60), (0, 60)], 100, None),  # no two fit: left alone
        ([(1, 10), (0, 10), (1, 10), (1, 10)], 100, (2, 2)),  # only adjacent files of a level
    ],
)
def test_a_merge_takes_the_oldest_adjacent_run_that_fits(specs, cap, expected) -> None:
    files = _files(*specs)
    level = files[expected[0]].level if expected else 0
    window = archiver_window(files, level, 4, cap)
    if expected is None:
        assert window is None
    else:
        start, run = window
        assert (start, len(run)) == expected and run == list(files[start : start + len(run)])


READER = """
import sys
import fsspec
from lakebraid.timeline.archive import read_archive_file
fs = fsspec.filesystem("file")
for _ in range(20):  # as a long-lived process reads the archive's files, then exits
    rows = read_archive_file(fs, sys.argv[1], ["timeline", "name"])
print(rows.num_rows)
"""


def test_processes_that_read_archive_files_exit_cleanly(tmp_path, run_python) -> None:
    """Reading archive files leaves no Arrow thread calling into Python: with
    ``pq.read_table``'s scanner over the fsspec file, about half of such processes aborted
    at exit ("terminate called without an active exception") after all their work."""
    rows = [(G, f"{t(i)}.commit", b"body %d" % i) for i in range(5000)]
    path = str(tmp_path / "0000000001_archive.parquet")
    pq.write_table(encode_rows(rows), path, row_group_size=1000)  # an archive of a long life
    ends = []
    for _ in range(10):  # two at a time: the abort needs the cores free at the exit
        procs = [run_python(READER, path) for _ in range(2)]
        ends += [(p.communicate(timeout=300), p.returncode) for p in procs]
    failed = [(code, err[-800:]) for (_, err), code in ends if code != 0]
    assert not failed, failed  # only the failing processes: their code and stderr
    assert {out for (out, _), _ in ends} == {"5000\n"}
