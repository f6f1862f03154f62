"""Merge-on-read writes of the in-process engine against copy-on-write: the same random
upserts (in-batch duplicates, keys moving partitions), inserts of new keys and deletes applied
to a table of each type read the same now and as of every earlier instant, and the record
index answers the same. (``engine/spark/test_merge_on_read_spark.py``: the same through the
Spark engine.)"""

from __future__ import annotations

import json
import os
import random
from functools import partial

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from table_fixtures import DAYS
from table_fixtures import random_batch as batch

from lakebraid.index.datalog import iter_blocks
from lakebraid.timeline.layout import parse_data_file_name
from lakebraid.writers.cli.main import main
from lakebraid.writers.client import WriteClient
from lakebraid.writers.engine import compaction, rewrites
from lakebraid.writers.errors import CorruptDataLogError, WriteConflictError, WriteError
from lakebraid.writers.write.datafile import data_schema, spec_of
from lakebraid.writers.write.slices import ReadUnit, read_unit

COLUMNS = ["id", "day", "ts", "amount"]


def rows(client, as_of=None) -> dict[str, tuple]:
    table = client.read_arrow(as_of)
    found = table.select(COLUMNS).to_pylist()
    assert len(found) == len({r["id"] for r in found}), "a key appears twice"
    return {r["id"]: (r["day"], r["ts"], r["amount"]) for r in found}


def located(client, keys: list[str]) -> dict[str, str | None]:
    return {k: (at.partition if at else None) for k, at in client.lookup(keys).items()}


@pytest.mark.parametrize(
    ("seed", "mode"), [(1, "commit_time"), (2, "commit_time"), (3, "event_time"), (4, "event_time")]
)
def test_merge_on_read_reads_as_copy_on_write_at_every_instant(tmp_path, seed, mode) -> None:
    """``event_time``: events arrive out of order (ts drawn at random), so older events of
    stored keys, moving keys among them, must lose to the stored row on both types."""
    rng = random.Random(seed)
    options = {
        "metadata.compact.max.log.files": 3,
        "metadata.compact.log.ratio": 0,
        "write.merge.mode": mode,
    }
    cow = WriteClient.create(str(tmp_path / "cow"), "id", ["day"], "ts", **options)
    mor = WriteClient.create(
        str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read", **options
    )
    keys = [f"k{i:03d}" for i in range(60)]
    first = batch(rng, keys[:40], 40, 0)
    first = pa.Table.from_pylist(list({r["id"]: r for r in first.to_pylist()}.values()))
    pairs = [(cow.bulk_insert(first), mor.bulk_insert(first))]
    compactions = []
    fresh: list[str] = []
    for step in range(8):
        if rng.random() < 0.25:  # a compaction reads the same and changes no instant's read
            before = rows(mor)
            done = mor.compact(min_log_files=rng.choice([1, 2]))
            if done is not None:
                compactions.append(done)
                pairs.append((pairs[-1][0], done))
            assert rows(mor) == before
        if rng.random() < 0.3:
            gone = rng.sample(keys, 8)
            pairs.append((cow.delete(gone), mor.delete(gone)))
        elif rng.random() < 0.3:  # new keys only: index blocks written ahead (commit.ahead)
            new = [f"n{step}{i:02d}" for i in range(rng.randrange(1, 30))]
            fresh.extend(new)
            data = batch(rng, new, len(new), 10 * (step + 1))
            data = pa.Table.from_pylist(list({r["id"]: r for r in data.to_pylist()}.values()))
            how = rng.choice(["insert", "bulk_insert"])
            pairs.append((getattr(cow, how)(data), getattr(mor, how)(data)))
        else:
            ts = 10 * (step + 1) if mode == "commit_time" else rng.randrange(40)
            data = batch(rng, keys, 25, ts)
            pairs.append((cow.upsert(data), mor.upsert(data)))
        assert rows(mor) == rows(cow), f"step {step}"
    for at_cow, at_mor in pairs:
        assert rows(mor, at_mor) == rows(cow, at_cow)
    assert located(mor, keys + fresh) == located(cow, keys + fresh)
    logs = [p for p in mor.file_paths() if parse_data_file_name(p.rsplit("/", 1)[1]).kind == "log"]
    assert logs, "the merge-on-read table wrote no log"
    for path in logs:
        blocks = list(iter_blocks(mor.table.fs, path))
        assert blocks and all(b.header.instant in path for b in blocks)
    assert not any(p.endswith(".log") for p in cow.file_paths())
    assert mor.validate() == [] and cow.validate() == []
    final = mor.compact()
    assert final is not None and rows(mor) == rows(cow)
    assert not [p for p in mor.file_paths() if p.endswith(".log")]
    assert mor.validate() == []
    mor.rollback(final)  # undone: the logs are the slices' again
    assert rows(mor) == rows(cow) and mor.validate() == []
    assert [p for p in mor.file_paths() if p.endswith(".log")]


def test_validate_names_a_damaged_log_and_reads_refuse_it(tmp_path) -> None:
    rng = random.Random(5)
    mor = WriteClient.create(str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read")
    keys = [f"k{i:03d}" for i in range(20)]
    mor.bulk_insert(
        pa.Table.from_pylist([{"id": k, "day": DAYS[0], "ts": 0, "amount": 1.0} for k in keys])
    )
    mor.upsert(batch(rng, keys[:10], 10, 5))
    assert mor.validate() == []
    log = next(p for p in mor.file_paths() if p.endswith(".log"))
    with open(log, "r+b") as handle:
        handle.seek(40)
        byte = handle.read(1)
        handle.seek(40)
        handle.write(bytes([byte[0] ^ 0xFF]))
    problems = mor.validate()
    assert problems and all(log.rsplit("/", 1)[1] in p for p in problems), problems
    assert any("checksum" in p for p in problems) and any("data file" in p for p in problems)
    with pytest.raises(CorruptDataLogError) as info:
        mor.read_arrow()
    assert log in str(info.value)


@pytest.mark.xdist_group("spark")
def test_spark_reads_merged_slices_as_the_in_process_read(tmp_path) -> None:
    rng = random.Random(7)
    mor = WriteClient.create(str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read")
    keys = [f"k{i:03d}" for i in range(30)]
    first = batch(rng, keys, 30, 0)
    mor.bulk_insert(pa.Table.from_pylist(list({r["id"]: r for r in first.to_pylist()}.values())))
    for step in range(3):
        mor.upsert(batch(rng, keys, 10, 10 * (step + 1)))
    mor.delete(keys[:3])
    expected = rows(mor)
    assert any(p.endswith(".log") for p in mor.file_paths())
    frame = mor.read().select(*COLUMNS).collect()
    assert {r["id"]: (r["day"], r["ts"], r["amount"]) for r in frame} == expected
    assert len(frame) == len(expected)
    day = DAYS[1]
    narrowed = mor.read(where=f"day = '{day}'").select(*COLUMNS).collect()
    assert {r["id"] for r in narrowed} == {k for k, v in expected.items() if v[0] == day}
    loaded = mor.spark.read.format("lakebraid").load(mor.path).select(*COLUMNS).collect()
    assert {r["id"]: (r["day"], r["ts"], r["amount"]) for r in loaded} == expected
    assert len(loaded) == len(expected)


def test_undo_and_clean_around_a_compaction(tmp_path) -> None:
    options = {"clean.inline": False, "clean.retain.commits": 1}
    mor = WriteClient.create(
        str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read", **options
    )
    keys = [f"k{i}" for i in range(6)]
    mor.bulk_insert(
        pa.table({"id": keys, "day": [DAYS[0]] * 6, "ts": [0] * 6, "amount": [0.0] * 6})
    )
    start = rows(mor)
    update = pa.table({"id": keys[:2], "day": [DAYS[0]] * 2, "ts": [1, 1], "amount": [5.0, 6.0]})
    upsert = mor.upsert(update)
    updated = rows(mor)
    assert updated["k0"] == (DAYS[0], 1, 5.0)
    compaction = mor.compact()
    assert compaction is not None and rows(mor) == updated
    with pytest.raises(WriteError, match=rf"later commits \['{compaction}'\] rewrote") as info:
        mor.rollback(upsert)
    assert upsert in str(info.value)
    assert rows(mor) == updated
    mor.rollback(compaction)
    mor.rollback(upsert)
    assert rows(mor) == start and mor.validate() == []
    # compacted again and cleaned: the folded base and logs leave the disk, reads stay whole
    mor.upsert(update)
    folded = set(mor.file_paths())
    mor.compact()
    mor.upsert(update.set_column(3, "amount", pa.array([7.0, 8.0])))
    mor.clean()
    assert not [p for p in folded if os.path.exists(p)]
    assert rows(mor)["k1"] == (DAYS[0], 1, 8.0) and mor.validate() == []


def _small(tmp_path) -> WriteClient:
    mor = WriteClient.create(str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read")
    keys = [f"k{i}" for i in range(6)]
    mor.bulk_insert(
        pa.table({"id": keys, "day": [DAYS[0]] * 6, "ts": [0] * 6, "amount": [0.0] * 6})
    )
    mor.upsert(_update(1.0))
    return mor


def _first_run(monkeypatch, module, name: str, meanwhile) -> None:
    """``module.name`` runs ``meanwhile()`` (another writer) before its own work."""
    original = getattr(module, name)

    def wrapped(*args, **kwargs):
        assert meanwhile() is not None
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)


def _update(amount: float) -> pa.Table:
    return pa.table({"id": ["k0"], "day": [DAYS[0]], "ts": [1], "amount": [amount]})


def test_an_append_during_a_compaction_of_its_group_wins_and_the_compaction_retries(
    tmp_path, monkeypatch
) -> None:
    mor = _small(tmp_path)
    append = partial(mor.upsert, _update(2.0))
    _first_run(monkeypatch, compaction, "compact_file_group", append)
    with pytest.raises(WriteConflictError, match="retry it"):
        mor.compact()
    monkeypatch.undo()
    assert rows(mor)["k0"] == (DAYS[0], 1, 2.0)  # the append's row, nothing lost
    assert len([p for p in mor.file_paths() if p.endswith(".log")]) == 2
    assert mor.validate() == []
    assert mor.compact() is not None and rows(mor)["k0"] == (DAYS[0], 1, 2.0)


def test_an_append_that_a_compaction_overtook_is_a_retryable_conflict(
    tmp_path, monkeypatch
) -> None:
    mor = _small(tmp_path)
    _first_run(monkeypatch, rewrites, "append_to_file_group", mor.compact)
    with pytest.raises(WriteConflictError):
        mor.upsert(_update(2.0))
    monkeypatch.undo()
    assert rows(mor)["k0"] == (DAYS[0], 1, 1.0)  # the compacted state; the append undone
    assert not [p for p in mor.file_paths() if p.endswith(".log")]
    assert mor.validate() == []
    mor.upsert(_update(2.0))  # the retry
    assert rows(mor)["k0"] == (DAYS[0], 1, 2.0) and mor.validate() == []


def test_inline_compaction_folds_a_group_once_its_logs_reach_the_limit(tmp_path, capsys) -> None:
    options = {"compaction.max.log.files": 2}
    mor = WriteClient.create(
        str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read", **options
    )
    keys = [f"k{i}" for i in range(4)]
    mor.bulk_insert(
        pa.table({"id": keys, "day": [DAYS[0]] * 4, "ts": [0] * 4, "amount": [0.0] * 4})
    )
    logs = lambda: [p for p in mor.file_paths() if p.endswith(".log")]  # noqa: E731
    mor.upsert(_update(1.0))
    assert len(logs()) == 1  # under the limit: no compaction
    mor.upsert(_update(2.0))
    assert logs() == []  # the second log reached it: folded inline, in its own commit
    assert [i["operation"] for i in mor.history(limit=2)] == ["compaction", "upsert"]
    assert rows(mor)["k0"] == (DAYS[0], 1, 2.0) and mor.validate() == []
    off = WriteClient.open(mor.path, **{"compaction.inline": "false"})
    off.upsert(_update(3.0))
    off.upsert(_update(4.0))
    assert len(logs()) == 2
    assert main(["compact", mor.path, "--data", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compaction"] is not None
    assert logs() == [] and rows(mor)["k0"] == (DAYS[0], 1, 4.0)
    assert main(["compact", mor.path, "--data"]) == 0
    assert "nothing to compact" in capsys.readouterr().out


@pytest.mark.parametrize("new_key", [False, True])
def test_a_compacted_base_keeps_its_dictionaries_and_key_order(tmp_path, new_key) -> None:
    """A compaction merges the commit time and partition columns as Arrow dictionaries (as a
    copy-on-write rewrite does: no string hashed per row) and writes its base in key order,
    whether the logs only updated keys (merged in place) or added one (sorted)."""
    mor = _small(tmp_path)
    mor.upsert(_update(2.0))
    if new_key:
        mor.upsert(pa.table({"id": ["k00"], "day": [DAYS[0]], "ts": [1], "amount": [9.0]}))
    before = rows(mor)
    mor.compact()
    assert rows(mor) == before and mor.validate() == []
    (base,) = [p for p in mor.file_paths() if p.endswith(".parquet")]
    stored = pq.read_table(base)
    for name in ("day", "_braid_commit_time"):
        assert pa.types.is_dictionary(stored.schema.field(name).type), name
    keys = stored.column("id").to_pylist()
    assert keys == sorted(keys) and len(keys) == 6 + new_key
    assert len(set(stored.column("_braid_commit_time").to_pylist())) == 2 + new_key


def test_a_compaction_keeps_the_text_dictionaries_its_base_chose(tmp_path) -> None:
    """A text column of few values that the base stores as an Arrow dictionary (chosen by
    ``writers.write.encoding``) is merged as one when the reader keeps dictionaries (a
    compaction's read: no string decoded and hashed again), as text otherwise, with the same
    rows; the compacted base stores it as a dictionary too."""
    mor = WriteClient.create(str(tmp_path / "t"), "id", [], "ts", table_type="merge_on_read")
    n = 4000
    keys = [f"k{i:05d}" for i in range(n)]
    kinds = [("view", "click", "buy")[i % 3] for i in range(n)]
    mor.bulk_insert(pa.table({"id": keys, "kind": kinds, "ts": [0] * n}))
    (first,) = mor.file_paths()
    assert pa.types.is_dictionary(pq.read_schema(first).field("kind").type)
    mor.upsert(pa.table({"id": keys[:500], "kind": ["refund"] * 500, "ts": [1] * 500}))
    logs = tuple(p for p in mor.file_paths() if p.endswith(".log"))
    schema = data_schema(spec_of(mor.schema()))
    fs = mor.table.fs
    text = read_unit(fs, ReadUnit(first, logs), schema, "id", "ts")
    kept = read_unit(fs, ReadUnit(first, logs), schema, "id", "ts", keep_dictionaries=True)
    assert text.schema.field("kind").type == pa.string()
    assert pa.types.is_dictionary(kept.schema.field("kind").type)
    assert kept.column("kind").to_pylist() == text.column("kind").to_pylist()
    assert text.column("kind").to_pylist()[:2] == ["refund", "refund"]
    before = mor.read_arrow().select(["id", "kind", "ts"]).sort_by("id")
    mor.compact()
    (base,) = [p for p in mor.file_paths() if p.endswith(".parquet")]
    after = mor.read_arrow().select(["id", "kind", "ts"]).sort_by("id")
    assert base != first and after.equals(before) and mor.validate() == []
    assert pa.types.is_dictionary(pq.read_schema(base).field("kind").type)


def test_inline_compaction_leaves_the_groups_other_writes_append_to(tmp_path) -> None:
    """A write compacts only the due groups it wrote itself: a writer of another partition
    never conflicts through this one's compaction of its group."""
    options = {"compaction.max.log.files": 2}
    mor = WriteClient.create(
        str(tmp_path / "mor"), "id", ["day"], "ts", table_type="merge_on_read", **options
    )
    first, second = DAYS[0], DAYS[1]
    mor.bulk_insert(
        pa.table({"id": ["a", "b"], "day": [first, second], "ts": [0, 0], "amount": [0.0, 0.0]})
    )

    def logs_of(day: str) -> list[str]:
        return [p for p in mor.file_paths() if p.endswith(".log") and f"day={day}/" in p]

    def update(key: str, day: str, ts: int) -> pa.Table:
        return pa.table({"id": [key], "day": [day], "ts": [ts], "amount": [float(ts)]})

    off = WriteClient.open(mor.path, **{"compaction.inline": "false"})
    off.upsert(update("a", first, 1))
    off.upsert(update("a", first, 2))
    assert len(logs_of(first)) == 2  # due, left by a writer that does not compact inline
    mor.upsert(update("b", second, 1))
    assert len(logs_of(first)) == 2, "another write's due group was compacted"
    assert len(logs_of(second)) == 1
    assert mor.history(limit=1)[0]["operation"] == "upsert"
    mor.upsert(update("a", first, 3))  # its own group, due: folded inline
    assert logs_of(first) == [] and len(logs_of(second)) == 1
    assert [i["operation"] for i in mor.history(limit=2)] == ["compaction", "upsert"]
    assert rows(mor) == {"a": (first, 3, 3.0), "b": (second, 1, 1.0)}
    assert mor.validate() == []
