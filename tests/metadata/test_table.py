"""The metadata table end to end: writes, visibility, time travel, compaction, corruption, lookups.

Instants are simulated on the three timelines around ``MetadataTable.write`` the way the commit
protocol (design section 3) drives them; the expected state comes from a plain-dict model of
the visibility rule (design section 2), never from the code under test.
"""

from __future__ import annotations

import os
import posixpath
import random
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule
from table_fixtures import small_config

import lakebraid.metadata.settings as msettings
from lakebraid.index import lookup as index_lookup
from lakebraid.index.reindex import reindex_record_index
from lakebraid.metadata.basefile import base_info
from lakebraid.metadata.errors import CorruptLogBlockError, MetadataError
from lakebraid.metadata.hashing import file_groups_of
from lakebraid.metadata.records import (
    ColumnStatsRecord,
    Partition,
    RecordLocation,
    int_to_instant,
    ints_to_file_id,
)
from lakebraid.metadata.slices import parse_name
from lakebraid.metadata.table import MetadataTable
from lakebraid.metadata.writer import InstantChanges
from lakebraid.timeline.bodies import RollbackBody, encode_body
from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.timeline.table_config import IndexSettings

KINDS = (TimelineKind.DATA, TimelineKind.METADATA, TimelineKind.GLOBAL)
ACTIONS = {
    TimelineKind.DATA: Action.COMMIT,
    TimelineKind.METADATA: Action.DELTACOMMIT,
    TimelineKind.GLOBAL: Action.COMMIT,
}
KEYS = [f"key-{i:02d}" for i in range(12)]
PARTS = ["day=1", "day=2", "day=3"]
FILES = [f"f{i}.parquet" for i in range(5)]
FILE_IDS = [
    str(uuid.UUID(int=1)),
    str(uuid.UUID(int=(1 << 127) | 7)),  # high bit set: negative int64 halves
    str(uuid.UUID(int=(1 << 63) | (1 << 64) | 3)),
    "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
]
COLUMNS = ["id", "ts", "id2"]  # "id" is a prefix of "id2": each reads only its own records


def make_table(path: str, index: IndexSettings, options: dict[str, object] | None = None):
    config = small_config(index=index)
    return TableTimelines.create(path, config, options)


def index_upserts(rows: Iterable[tuple[str, str, str]]) -> pa.Table | None:
    rows = list(rows)
    if not rows:
        return None
    keys, parts, fids = zip(*rows, strict=True)
    return pa.table(
        {
            "key": pa.array(keys, pa.string()),
            "partition": pa.array(parts, pa.string()),
            "file_id": pa.array(fids, pa.string()),
        }
    )


# -- simulating the commit protocol ----------------------------------------------------------

REQUESTED, INFLIGHT, META_DONE, DONE = "requested", "inflight", "meta_done", "done"


@dataclass
class Harness:
    """Drives instants through the three timelines and keeps the plain-dict model."""

    table: TableTimelines
    times: list[str] = field(default_factory=list)  # every time issued, in order
    level: dict[str, str] = field(default_factory=dict)  # data instant -> progress
    changes: dict[str, InstantChanges] = field(default_factory=dict)
    completed: list[tuple[str, str]] = field(default_factory=list)  # (completion, time)
    rolled_back: set[str] = field(default_factory=set)
    compactions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.table.config.created_at is not None
        self.times.append(self.table.config.created_at)

    @property
    def meta(self) -> MetadataTable:
        return MetadataTable(self.table)

    def issue(self) -> str:
        time = self.table.next_time()
        self.times.append(time)
        return time

    def begin(self, changes: InstantChanges, fate: str = DONE) -> str:
        """One data-table instant whose log blocks are written, left at ``fate``."""
        store = self.table.store
        with self.table.lock:
            time = self.issue()
            for kind in KINDS:
                store.request(kind, time, ACTIONS[kind])
        self.level[time] = REQUESTED
        self.changes[time] = changes
        if fate != REQUESTED:
            for kind in KINDS:
                store.start(kind, time, ACTIONS[kind])
            self.level[time] = INFLIGHT
        # log blocks are written even for the instants left requested: they must stay unseen
        self.meta.write(time, changes)
        if fate in (META_DONE, DONE):
            with self.table.lock:
                done = self.issue()
                for kind in KINDS[: 3 if fate == DONE else 2]:
                    store.complete(kind, time, ACTIONS[kind], completion_time=done)
            self.level[time] = fate
            if fate == DONE:
                self.completed.append((done, time))
        return time

    def finish(self, time: str) -> str | None:
        """Complete a pending instant on every timeline still missing it (a slow writer), or
        roll it back when a file of another instant now sits beside one of its record-index
        commit bases: the writer's conflict rule 7 refuses that completion (None)."""
        store, level = self.table.store, self.level[time]
        assert level != DONE
        if level == REQUESTED:
            for kind in KINDS:
                store.start(kind, time, ACTIONS[kind])
        with self.table.lock:
            if self.meta.base_neighbours(time, self.commit_base_groups(time)):
                self.rollback(time)
                return None
            done = self.issue()
            kinds = KINDS if level != META_DONE else (TimelineKind.GLOBAL,)
            for kind in kinds:
                store.complete(kind, time, ACTIONS[kind], completion_time=done)
        self.level[time] = DONE
        self.completed.append((done, time))
        return done

    def commit_base_groups(self, time: str) -> set[str]:
        folder = self.table.layout.metadata_partition_dir(str(Partition.RECORD_INDEX))
        names = os.listdir(folder) if os.path.isdir(folder) else []
        return {
            f.file_group
            for f in map(parse_name, names)
            if f and f.instant == time and f.kind == "base"
        }

    def rollback(self, target: str) -> str:
        store, kind = self.table.store, TimelineKind.GLOBAL
        body = encode_body(RollbackBody(target=target, target_action=Action.COMMIT))
        with self.table.lock:
            time = self.issue()
            store.request(kind, time, Action.ROLLBACK, body)
        store.start(kind, time, Action.ROLLBACK, body)
        with self.table.lock:
            store.complete(kind, time, Action.ROLLBACK, body, completion_time=self.issue())
        self.rolled_back.add(target)
        return time

    def compact(self, partitions: Sequence[Partition] | None = None, min_logs: int = 1):
        time = self.meta.compact(partitions, min_logs=min_logs)
        if time is not None:
            inst = self.table.timeline(TimelineKind.METADATA).get(time, Action.COMPACTION)
            assert inst is not None and inst.completion_time is not None
            self.times.extend([time, inst.completion_time])
            self.compactions.append(time)
        return time

    # ---- the model -------------------------------------------------------------------
    def expected(self, as_of: str | None) -> dict[str, Any]:
        """The state as of ``as_of``: every instant completed on global at or before it and
        never rolled back, applied in completion order. An ``as_of`` that is the time of an
        instant completed on global means "after it": its completion time."""
        if as_of is not None:
            done_on_global = self.table.timeline(TimelineKind.GLOBAL).get(as_of)
            if done_on_global is not None and done_on_global.completion_time is not None:
                as_of = done_on_global.completion_time
        index: dict[str, RecordLocation] = {}
        files: dict[str, dict[str, int]] = {}
        partitions: set[str] = set()
        stats: dict[tuple[str, str, str], ColumnStatsRecord] = {}
        for done, time in sorted(self.completed):
            if time in self.rolled_back or (as_of is not None and done > as_of):
                continue
            ch = self.changes[time]
            for key in ch.index_deletes:
                index.pop(key, None)
            if ch.index_upserts is not None:
                for row in ch.index_upserts.to_pylist():
                    index[row["key"]] = RecordLocation(row["partition"], row["file_id"], time)
            for part, names in ch.files_deleted.items():
                for name in names:
                    files.get(part, {}).pop(name, None)
            for part, added in ch.files_added.items():
                files.setdefault(part, {}).update(added)
            partitions -= set(ch.partitions_deleted)
            partitions |= set(ch.files_added)
            for rec in ch.column_stats:
                key = (rec.column, rec.partition, rec.file)
                if rec.deleted:
                    stats.pop(key, None)
                else:
                    stats[key] = rec
        return {
            "locations": {k: index.get(k) for k in KEYS},
            "files": {p: dict(sorted(f.items())) for p, f in sorted(files.items()) if f},
            "partitions": sorted(partitions),
            "column_stats": dict(sorted(stats.items())),
        }

    def observed(self, as_of: str | None) -> dict[str, Any]:
        reader = MetadataTable(self.table).reader(as_of)
        stats = reader.column_stats()
        by_key = {(r.column, r.partition, r.file): r for r in stats}
        assert len(by_key) == len(stats), "a column_stats key is listed twice"
        order = lambda r: (r.column, r.partition, r.file)  # noqa: E731
        for names in ({"id"}, {"id2", "ts"}, set(COLUMNS)):
            only = sorted(reader.column_stats(columns=names), key=order)
            assert only == sorted((r for r in stats if r.column in names), key=order), names
        locations = index_lookup.locations(reader, KEYS)
        asked = KEYS[1::2] + KEYS[::2]  # another order: locate answers in the order asked
        found, at = index_lookup.locate(reader, pa.array(asked, pa.string()))
        rows = found.to_pylist()
        located = {
            key: None
            if i is None
            else RecordLocation(
                rows[i]["partition"],
                ints_to_file_id(rows[i]["file_id_hi"], rows[i]["file_id_lo"]),
                int_to_instant(rows[i]["instant"]),
            )
            for key, i in zip(asked, at.to_pylist(), strict=True)
        }
        assert located == locations, "locate disagrees with locations"
        return {
            "locations": locations,
            "files": reader.files(),
            "partitions": reader.partitions(),
            "column_stats": dict(sorted(by_key.items())),
        }

    def points(self) -> list[str | None]:
        return [*self.times, None]

    def check_all(self, points: Iterable[str | None] | None = None) -> dict:
        seen = {}
        for point in self.points() if points is None else points:
            got = self.observed(point)
            assert got == self.expected(point), f"as of {point}"
            seen[point] = got
        return seen


# -- 1. differential property test -------------------------------------------------------------

STAT_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.dates(),
    st.datetimes(),
)


@st.composite
def instant_changes(draw) -> InstantChanges:
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=5))
    cut = draw(st.integers(0, len(keys)))
    upserts = [
        (k, draw(st.sampled_from(PARTS)), draw(st.sampled_from(FILE_IDS))) for k in keys[:cut]
    ]
    files_added = draw(
        st.dictionaries(
            st.sampled_from(PARTS),
            st.dictionaries(st.sampled_from(FILES), st.integers(0, 2**40), max_size=3),
            max_size=2,
        )
    )
    files_deleted = draw(
        st.dictionaries(
            st.sampled_from(PARTS),
            st.lists(st.sampled_from(FILES), unique=True, min_size=1, max_size=2),
            max_size=2,
        )
    )
    parts_deleted = draw(st.lists(st.sampled_from(PARTS), unique=True, max_size=1))
    stat_keys = draw(
        st.lists(
            st.tuples(st.sampled_from(COLUMNS), st.sampled_from(PARTS), st.sampled_from(FILES)),
            unique=True,
            max_size=3,
        )
    )
    stats = []
    for column, part, name in stat_keys:
        if draw(st.booleans()):
            stats.append(ColumnStatsRecord.tombstone(column, part, name))
        else:
            counts = draw(st.tuples(*[st.integers(0, 10**6)] * 3))
            stats.append(
                ColumnStatsRecord(column, part, name, draw(STAT_VALUES), draw(STAT_VALUES), *counts)
            )
    return InstantChanges(
        files_added=files_added,
        files_deleted=files_deleted,
        partitions_deleted=parts_deleted,
        column_stats=stats,
        index_upserts=index_upserts(upserts),
        index_deletes=keys[cut:],
    )


FATES = st.sampled_from([DONE, DONE, DONE, DONE, REQUESTED, INFLIGHT, META_DONE])
PARTITION_SETS = st.sampled_from(
    [None, None, [Partition.RECORD_INDEX], [Partition.FILES, Partition.COLUMN_STATS]]
)
MODEL_INDEX = IndexSettings(
    record_index_file_groups=3, files_file_groups=2, column_stats_file_groups=2
)


class MetadataTableModel(RuleBasedStateMachine):
    """Random instants (completed, left pending, finished late, rolled back) with compactions
    in between; at every compaction and at the end, reads as of every time issued (and now)
    must equal the model, and a compaction must change no read."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="lakebraid-model-")
        # one reader thread: starting pools would dominate the cost of these tiny reads (the
        # other tests keep the default pool)
        options = {"metadata.lookup.threads": 1, "metadata.record_index.commit.bases": True}
        table = make_table(f"{self.folder}/t", MODEL_INDEX, options)
        self.harness = Harness(table)
        self.snapshot: tuple[int, dict] | None = None  # (len(times), reads) when taken

    def reads_now(self) -> dict:
        """Reads at every point, checked against the model (cached while nothing changed)."""
        if self.snapshot is None or self.snapshot[0] != len(self.harness.times):
            self.snapshot = (len(self.harness.times), self.harness.check_all())
        return self.snapshot[1]

    def pending(self) -> list[str]:
        h = self.harness
        return [t for t, lvl in h.level.items() if lvl != DONE and t not in h.rolled_back]

    def done(self) -> list[str]:
        return [t for _, t in self.harness.completed if t not in self.harness.rolled_back]

    @rule(changes=instant_changes(), fate=FATES)
    def write(self, changes: InstantChanges, fate: str) -> None:
        self.harness.begin(changes, fate)

    @rule(partitions=PARTITION_SETS, min_logs=st.sampled_from([1, 1, 2]))
    def compact(self, partitions: list[Partition] | None, min_logs: int) -> None:
        before = self.reads_now()
        if self.harness.compact(partitions, min_logs) is None:
            return  # no work, no instant: nothing changed
        # reads as of instants before the compaction answer as they did before it ...
        assert self.harness.check_all(before) == before
        # ... and as of the compaction itself and now, as the model says
        self.reads_now()

    @precondition(lambda self: self.done())
    @rule(index=st.integers(0, 99))
    def rollback_completed(self, index: int) -> None:
        done = self.done()
        self.harness.rollback(done[index % len(done)])

    @precondition(lambda self: self.pending())
    @rule(index=st.integers(0, 99))
    def rollback_pending(self, index: int) -> None:
        pending = self.pending()
        self.harness.rollback(pending[index % len(pending)])

    @precondition(lambda self: self.pending())
    @rule(index=st.integers(0, 99))
    def finish_pending(self, index: int) -> None:
        pending = self.pending()
        self.harness.finish(pending[index % len(pending)])

    def teardown(self) -> None:
        try:
            self.reads_now()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


MetadataTableModel.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMetadataTableModel = MetadataTableModel.TestCase


# -- deterministic scenarios --------------------------------------------------------------------


def small_index() -> IndexSettings:
    return IndexSettings(
        record_index_file_groups=2, files_file_groups=1, column_stats_file_groups=1
    )


def changes_for(keys: Sequence[str], fid: str, part: str, name: str, size: int) -> InstantChanges:
    return InstantChanges(
        files_added={part: {name: size}},
        column_stats=[ColumnStatsRecord("ts", part, name, size, size + 1, 0, 1, size)],
        index_upserts=index_upserts((k, part, fid) for k in keys),
    )


def bases_of(table: TableTimelines, time: str) -> dict[str, tuple[str, ...]]:
    """``{base file path: folded instants}`` of every base written by instant ``time``."""
    found = {}
    for partition in Partition:
        folder = table.layout.metadata_partition_dir(str(partition))
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if name.endswith(f"_{time}.parquet"):
                path = posixpath.join(folder, name)
                found[path] = base_info(table.fs, path).folded
    return found


def test_compaction_folds_only_visible_instants(tmp_path) -> None:
    harness = Harness(make_table(str(tmp_path / "t"), small_index()))
    f1, f2, f3, f4 = FILE_IDS
    t1 = harness.begin(changes_for(KEYS[:6], f1, "day=1", "a.parquet", 10))
    t2 = harness.begin(changes_for(KEYS[:3], f2, "day=2", "b.parquet", 20), INFLIGHT)
    t3 = harness.begin(changes_for(KEYS[3:6], f3, "day=3", "c.parquet", 30), META_DONE)
    t4 = harness.begin(changes_for(KEYS[1:5], f4, "day=1", "d.parquet", 40))
    before = harness.check_all()
    k1 = harness.compact()
    assert k1 is not None
    bases = bases_of(harness.table, k1)
    # files + column_stats (one group each) + both record-index groups got logs of t1 and t4
    assert len(bases) == 4
    for path, folded in bases.items():
        assert t2 not in folded and t3 not in folded, path
        assert t1 in folded and t4 in folded, path
    assert harness.check_all(before) == before
    # the pending instants complete later, out of start order: t3 first, then t2
    harness.finish(t3)
    harness.finish(t2)
    now = harness.observed(None)
    assert now == harness.expected(None)
    # t2 completed last, so its locations win over t4's for the keys both wrote
    assert now["locations"]["key-01"] == RecordLocation("day=2", f2, t2)
    assert now["locations"]["key-04"] == RecordLocation("day=3", f3, t3)
    assert now["files"]["day=2"] == {"b.parquet": 20}
    reader = MetadataTable(harness.table).reader()
    for piece in reader.slices(Partition.RECORD_INDEX):
        assert piece.base_instant == k1
        assert set(piece.log_instants) <= {t2, t3}
        assert piece.log_instants == tuple(t for t in (t3, t2) if t in piece.log_instants)
    harness.check_all()
    # a second compaction folds them too, and nothing changes for any reader
    before = harness.check_all()
    k2 = harness.compact()
    assert k2 is not None
    for path, folded in bases_of(harness.table, k2).items():
        assert {t2, t3} & set(folded), path
        assert {t1, t4} <= set(folded), path  # what the base it replaced held, kept
    assert harness.check_all(before) == before
    # the compaction's body lists only the logs it folded (bounded), not all its bases hold
    store = harness.table.store
    done = store.load(TimelineKind.METADATA).get(k2, Action.COMPACTION)
    plan = msgspec.json.decode(store.read_body(TimelineKind.METADATA, done))
    assert plan["folded"] and all(set(t) <= {t2, t3} for t in plan["folded"].values())


def test_rollback_after_compaction_hides_the_folded_instant(tmp_path) -> None:
    logs_only = {"metadata.record_index.commit.bases": False}  # every base is a compaction's
    harness = Harness(make_table(str(tmp_path / "t"), small_index(), logs_only))
    f1, f2, f3, _ = FILE_IDS
    t0 = harness.begin(changes_for(KEYS[:4], f1, "day=1", "a.parquet", 1))
    k0 = harness.compact()
    t1 = harness.begin(changes_for(KEYS[4:8], f2, "day=2", "b.parquet", 2))
    t2 = harness.begin(
        InstantChanges(
            files_added={"day=3": {"c.parquet": 3}},
            files_deleted={"day=1": ["a.parquet"]},
            column_stats=[ColumnStatsRecord.tombstone("ts", "day=1", "a.parquet")],
            index_upserts=index_upserts((k, "day=3", f3) for k in KEYS[2:6]),
            index_deletes=KEYS[:2],
        )
    )
    k1 = harness.compact()
    assert k0 is not None and k1 is not None
    folded = bases_of(harness.table, k1)
    assert folded and all(t2 in f for f in folded.values())
    harness.check_all()
    harness.rollback(t2)
    harness.check_all()  # every point, also those between t2 and its rollback
    now = harness.observed(None)
    assert now["files"] == {"day=1": {"a.parquet": 1}, "day=2": {"b.parquet": 2}}
    assert now["partitions"] == ["day=1", "day=2"]
    assert now["locations"]["key-00"] == RecordLocation("day=1", f1, t0)
    assert now["locations"]["key-05"] == RecordLocation("day=2", f2, t1)
    # the slices fall back to k0's bases (which do not fold t2) plus t1's logs
    reader = MetadataTable(harness.table).reader()
    for partition in Partition:
        for piece in reader.slices(partition):
            assert piece.base_instant in (k0, None)
            assert t2 not in piece.log_instants
    # a compaction after the rollback folds what is visible, never t2
    before = harness.check_all()
    k2 = harness.compact()
    assert k2 is not None
    assert all(t2 not in f for f in bases_of(harness.table, k2).values())
    assert harness.check_all(before) == before


# -- 3. corruption -------------------------------------------------------------------------------


def test_corrupt_log_block_is_an_error_naming_file_and_offset(tmp_path) -> None:
    index = IndexSettings(record_index_file_groups=4)
    logs_only = {"metadata.record_index.commit.bases": False}  # two blocks in one log file
    harness = Harness(make_table(str(tmp_path / "t"), index, logs_only))
    fid = FILE_IDS[1]
    keys = [f"rec-{i:03d}" for i in range(40)]
    first = InstantChanges(index_upserts=index_upserts((k, "day=1", fid) for k in keys))
    t1 = harness.begin(first, INFLIGHT)
    # a second write of the same instant appends a second block to each log file
    second = InstantChanges(
        index_upserts=index_upserts((k, "day=2", fid) for k in keys[::2]),
        index_deletes=keys[1::4],
    )
    written = {w.file_group: w for w in harness.meta.write(t1, second)}
    harness.finish(t1)
    folder = harness.table.layout.metadata_partition_dir(str(Partition.RECORD_INDEX))
    victim = "record_index-0002"
    path = f"{folder}/{victim}_{t1}.log"
    size = os.path.getsize(path)
    second_at = size - written[victim].size  # where the second block starts
    assert second_at > 0

    groups = file_groups_of(keys, 4).tolist()
    group_of = {k: f"record_index-{g:04d}" for k, g in zip(keys, groups, strict=True)}
    in_victim = [k for k in keys if group_of[k] == victim]
    elsewhere = [k for k in keys if group_of[k] != victim]
    assert in_victim and elsewhere and len({group_of[k] for k in elsewhere}) == 3

    data = bytearray(open(path, "rb").read())
    rng = random.Random(1234)
    offsets = sorted(
        {0, 3, 7, 12, second_at - 1, second_at, size - 1, *rng.sample(range(size), 12)}
    )
    for offset in offsets:
        damaged = bytearray(data)
        damaged[offset] ^= 0x5A
        with open(path, "wb") as handle:
            handle.write(damaged)
        with pytest.raises(CorruptLogBlockError) as caught:
            index_lookup.locations(MetadataTable(harness.table).reader(), in_victim)
        start = 0 if offset < second_at else second_at
        assert caught.value.path == path
        assert caught.value.offset == start, offset
        assert path in str(caught.value) and f"byte offset {start}" in str(caught.value)
    # the other file groups read fine, and give what was written
    got = index_lookup.locations(MetadataTable(harness.table).reader(), elsewhere)
    deleted = set(keys[1::4])
    for n, key in enumerate(keys):
        if key not in got:
            continue
        if key in deleted:
            assert got[key] is None, key
        else:
            part = "day=2" if n % 2 == 0 else "day=1"
            assert got[key] == RecordLocation(part, fid, t1), key


# -- 4. seek or scan -------------------------------------------------------------------------


def test_lookup_seeks_for_few_keys_and_scans_for_many(tmp_path) -> None:
    assert msettings.BASE_ROW_GROUP_ROWS.name == "metadata.base.row.group.rows"
    options = {"metadata.base.row.group.rows": 1000}
    table = make_table(str(tmp_path / "t"), IndexSettings(), options)
    assert table.options.get(msettings.BASE_ROW_GROUP_ROWS) == 1000
    rng = random.Random(7)
    n = 50_000
    keys = [f"user-{rng.getrandbits(48):012x}-{i}" for i in range(n)]
    fids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(7)]
    parts = [f"day={d}" for d in range(1, 6)]
    instants = ["20240101000000000", "20240202123456789"]
    rows = {
        k: (parts[i % len(parts)], fids[i % len(fids)], instants[i % 2]) for i, k in enumerate(keys)
    }
    table_rows = pa.table(
        {
            "key": list(rows),
            "partition": [v[0] for v in rows.values()],
            "file_id": [v[1] for v in rows.values()],
            "instant": [v[2] for v in rows.values()],
        }
    )
    meta = MetadataTable(table)
    reindex = reindex_record_index(meta, table_rows)  # 50,000 rows: one group by the estimate
    folder = table.layout.metadata_partition_dir(str(Partition.RECORD_INDEX))
    for name in os.listdir(folder):
        info = base_info(table.fs, f"{folder}/{name}")
        assert info.instant == reindex
        assert len(info.row_group_min) == -(-info.num_rows // 1000)

    def check(wanted: list[str], mode: str) -> None:
        reader = meta.reader()
        absent = [f"absent-{i}" for i in range(3)]
        got = index_lookup.locations(reader, wanted + absent)
        assert reader.last_modes == {"record_index-0000": mode}
        assert got == {
            **{k: RecordLocation(*rows[k]) for k in wanted},
            **dict.fromkeys(absent),
        }
        table_out = index_lookup.lookup(reader, wanted)
        assert sorted(table_out.column("key").to_pylist()) == sorted(wanted)

    check(rng.sample(keys, 5), "seek")
    check(rng.sample(keys, 40_000), "scan")


def test_lookup_threads_stop_at_the_cores_on_a_local_disk(tmp_path) -> None:
    """Threads past the cores only pay off while reads wait on a network."""
    cores = os.cpu_count() or 1
    for asked in (1, cores, 64):
        table = make_table(
            str(tmp_path / f"t{asked}"), IndexSettings(), {"metadata.lookup.threads": asked}
        )
        assert MetadataTable(table).reader().threads() == min(asked, cores)


# -- bug: rolling back an instant folded by a reindex ----------------------------------------


def test_rollback_of_an_instant_folded_by_a_reindex_is_an_error_not_lost_rows(tmp_path) -> None:
    """A reindex writes full bases under new group counts, folding every visible instant. When
    one of them is rolled back, no base of the new layout is usable and the old layout's files
    hold only what the old group count routed to them: reads must refuse with an error naming
    the reindex rather than lose rows silently (the rollback service must re-run the reindex
    without the rolled-back instant)."""
    harness = Harness(make_table(str(tmp_path / "t"), IndexSettings()))
    f1, f2 = FILE_IDS[:2]
    t1 = harness.begin(changes_for(KEYS[:8], f1, "day=1", "a.parquet", 1))
    harness.compact()
    t2 = harness.begin(changes_for(KEYS[8:], f2, "day=2", "b.parquet", 2))
    rows = pa.table(
        {
            "key": KEYS,
            "partition": ["day=1"] * 8 + ["day=2"] * 4,
            "file_id": [f1] * 8 + [f2] * 4,
            "instant": [t1] * 8 + [t2] * 4,
        }
    )
    reindex_record_index(MetadataTable(harness.table), rows, n_groups=4)
    assert harness.observed(None) == harness.expected(None)
    harness.rollback(t2)
    with pytest.raises(MetadataError, match="run the reindex again"):
        index_lookup.locations(MetadataTable(harness.table).reader(), KEYS)
