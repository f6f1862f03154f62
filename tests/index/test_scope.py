"""The partition-scoped record index (``WriteClient.create(..., index_scope="partition")``):
a key is unique within its partition, the same key may live in several partitions.

A differential state machine runs random upserts (keys reappearing in other partitions),
deletes (by keys + ``partition=`` and by rows), reindexes and rollbacks against a plain model
(a dict of (day, key) -> value per commit), and checks reads, lookups per partition and as-of
lookups at every earlier commit; ``validate()`` at the end. Expected states come from the
model, never from the code under test."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from lakebraid.index.errors import RecordKeyError
from lakebraid.timeline.errors import ConfigError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import InputError

KEYS = [f"k{i}" for i in range(8)]
DAYS = ["d0", "d1", "d2"]
OPTIONS = {
    "write.merge.mode": "commit_time",
    "metadata.compact.max.log.files": 4,
    "metadata.compact.log.ratio": 0,
}
Model = dict[tuple[str, str], int]  # (day, key) -> value


def create(path: str, **options: object) -> WriteClient:
    return WriteClient.create(
        path,
        record_key="id",
        partition_by=["day"],
        precombine="ts",
        index_scope="partition",
        **{**OPTIONS, **options},
    )


def batch(pairs: list[tuple[str, str]], value: int) -> pa.Table:
    return pa.table(
        {
            "id": [k for _, k in pairs],
            "day": [d for d, _ in pairs],
            "ts": [value] * len(pairs),
            "v": [value] * len(pairs),
        }
    )


def table_state(client: WriteClient, as_of: object = None) -> Model:
    table = client.read_arrow(as_of)
    if table.num_rows == 0:
        return {}
    rows = table.select(["day", "id", "v"]).to_pylist()
    state = {(r["day"], r["id"]): r["v"] for r in rows}
    assert len(state) == len(rows), "a (partition, key) pair is stored twice"
    return state


def lookups(client: WriteClient, as_of: object = None) -> dict[tuple[str, str], str]:
    """(day, key) -> partition the index answers, for every day and key asked."""
    found = {}
    for day in DAYS:
        for key, where in client.lookup(KEYS, as_of=as_of, partition={"day": day}).items():
            if where is not None:
                found[(day, key)] = where.partition
    return found


class ScopedIndexModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model: Model = {}
        self.history: list[tuple[str, Model]] = []  # (commit, model after it)

    @initialize(path=st.just(None))
    def start(self, path: None) -> None:
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        self.client = create(f"{self.tmp.name}/t")

    def committed(self, instant: str) -> None:
        self.history.append((instant, dict(self.model)))

    @rule(
        pairs=st.lists(st.tuples(st.sampled_from(DAYS), st.sampled_from(KEYS)), min_size=1),
        value=st.integers(0, 1000),
    )
    def upsert(self, pairs: list[tuple[str, str]], value: int) -> None:
        instant = self.client.upsert(batch(pairs, value))
        self.model.update(dict.fromkeys(pairs, value))
        self.committed(instant)

    @rule(day=st.sampled_from(DAYS), keys=st.lists(st.sampled_from(KEYS), min_size=1))
    def delete_in_partition(self, day: str, keys: list[str]) -> None:
        instant = self.client.delete(keys, partition={"day": day})
        for key in keys:
            self.model.pop((day, key), None)
        self.committed(instant)

    @rule(pairs=st.lists(st.tuples(st.sampled_from(DAYS), st.sampled_from(KEYS)), min_size=1))
    def delete_rows(self, pairs: list[tuple[str, str]]) -> None:
        rows = pa.table({"id": [k for _, k in pairs], "day": [d for d, _ in pairs]})
        instant = self.client.delete(rows)
        for pair in pairs:
            self.model.pop(pair, None)
        self.committed(instant)

    @rule(groups=st.integers(1, 4))
    def reindex(self, groups: int) -> None:
        self.client.reindex(groups=groups)

    @rule()
    def rollback_last(self) -> None:
        if not self.history:
            return
        instant, _ = self.history.pop()
        self.client.rollback(instant)
        self.model = dict(self.history[-1][1]) if self.history else {}

    @invariant()
    def reads_and_lookups_match(self) -> None:
        if not hasattr(self, "client"):
            return
        assert table_state(self.client) == self.model
        assert lookups(self.client) == {pair: f"day={pair[0]}" for pair in self.model}

    def teardown(self) -> None:
        if hasattr(self, "client"):
            for instant, state in self.history:  # as of every commit still in history
                assert table_state(self.client, instant) == state, f"as of {instant}"
                assert set(lookups(self.client, instant)) == set(state), f"as of {instant}"
            assert self.client.validate() == []
            self.tmp.cleanup()


ScopedIndexModel.TestCase.settings = settings(
    max_examples=6,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_scoped_index_matches_a_model = ScopedIndexModel.TestCase


# ---- scenarios ---------------------------------------------------------------------------------


def test_same_key_in_two_partitions_are_two_records(tmp_path) -> None:
    client = create(str(tmp_path / "t"))
    client.upsert(batch([("d0", "a"), ("d1", "a")], 1))
    client.upsert(batch([("d1", "a")], 2))  # updates d1's record only, moves nothing
    assert table_state(client) == {("d0", "a"): 1, ("d1", "a"): 2}
    d0 = client.lookup(["a"], partition={"day": "d0"})["a"]
    d1 = client.lookup(["a"], partition="day=d1")["a"]
    assert (d0.partition, d1.partition) == ("day=d0", "day=d1")  # type: ignore[union-attr]
    assert client.lookup(["a"], partition={"day": "d2"}) == {"a": None}
    # insert refuses a key its partition holds, not one another partition holds
    client.insert(batch([("d2", "a")], 3))
    with pytest.raises(InputError, match="a"):
        client.insert(batch([("d2", "a")], 4))
    assert client.validate() == []


def test_spark_engine_keeps_keys_per_partition(tmp_path, spark) -> None:
    client = create(str(tmp_path / "t"), **{"write.inprocess.max.rows": 0})
    client._spark = spark
    frame = spark.createDataFrame(batch([(d, k) for d in DAYS for k in KEYS[:4]], 1).to_pandas())
    client.upsert(frame)
    again = batch([("d1", "k0"), ("d1", "k0"), ("d2", "k9")], 5)
    client.upsert(spark.createDataFrame(again.to_pandas()))
    want = {(d, k): 1 for d in DAYS for k in KEYS[:4]} | {("d1", "k0"): 5, ("d2", "k9"): 5}
    assert table_state(client) == want
    assert client.validate() == []


def test_secondary_index_on_a_scoped_table(tmp_path) -> None:
    client = create(str(tmp_path / "t"), **{"write.target.file.rows": 2})
    pairs = [(d, k) for d in DAYS for k in KEYS]
    table = batch(pairs, 0).set_column(3, "v", pa.array([i % 5 for i in range(len(pairs))]))
    client.upsert(table)
    client.create_index("v")
    client.upsert(batch([("d0", "k0"), ("d2", "k0")], 7))
    want = {(d, k) for (d, k), v in table_state(client).items() if v == 7}
    got = client.read_arrow().filter(pa.compute.equal(client.read_arrow().column("v"), 7))
    assert {(r["day"], r["id"]) for r in got.to_pylist()} == want == {("d0", "k0"), ("d2", "k0")}
    picked = client.file_paths(where="v = 7")
    assert len(picked) == 2  # the two file groups holding a row with v = 7
    assert client.validate() == []


def test_bad_scope_arguments_are_clear_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match="index_scope must be one of"):
        create(str(tmp_path / "a")).__class__.create(
            str(tmp_path / "b"), record_key="id", partition_by=["day"], index_scope="row"
        )
    with pytest.raises(ConfigError, match="needs partition fields"):
        WriteClient.create(str(tmp_path / "c"), record_key="id", index_scope="partition")
    client = create(str(tmp_path / "d"))
    client.upsert(batch([("d0", "a")], 1))
    with pytest.raises(RecordKeyError, match="partition-scoped"):
        client.lookup(["a"])
    with pytest.raises(RecordKeyError, match="partition-scoped"):
        client.delete(["a"])
    with pytest.raises(RecordKeyError, match="the table is partitioned by"):
        client.lookup(["a"], partition={"month": "m1"})
    with pytest.raises(RecordKeyError, match="expected day="):
        client.delete(["a"], partition="month=m1")
    with pytest.raises(InputError, match="both partition= and rows"):
        client.delete(pa.table({"id": ["a"], "day": ["d0"]}), partition={"day": "d0"})
    plain = WriteClient.create(str(tmp_path / "e"), record_key="id", partition_by=["day"])
    plain.upsert(batch([("d0", "a")], 1))
    with pytest.raises(RecordKeyError, match="for tables with a partition-scoped"):
        plain.lookup(["a"], partition={"day": "d0"})
    assert table_state(client) == {("d0", "a"): 1}  # nothing was lost on the way


def test_the_scope_is_stored_as_table_format_2(tmp_path) -> None:
    create(str(tmp_path / "t"))
    text = (tmp_path / "t" / ".braid" / "table.json").read_text()
    assert '"format_version": 2' in text and '"record_index_scope": "partition"' in text
    WriteClient.create(str(tmp_path / "g"), record_key="id", partition_by=["day"])
    assert '"format_version": 1' in (tmp_path / "g" / ".braid" / "table.json").read_text()
    reopened = WriteClient.open(str(tmp_path / "t"))
    assert reopened.table.config.index.record_index_scope == "partition"


# ---- file groups sized per partition ---------------------------------------------------------


def where_keys_live(client: WriteClient) -> dict[str, set[int]]:
    """day -> the record-index file groups holding its keys (read group by group)."""
    from lakebraid.metadata.records import Partition

    reader = client.metadata.reader()
    found: dict[str, set[int]] = {}
    for group in range(reader.group_count(Partition.RECORD_INDEX)):
        for key in reader.group_table(Partition.RECORD_INDEX, group).column("key").to_pylist():
            found.setdefault(key.split("\x00", 1)[0], set()).add(group)
    return found


def test_a_reindex_gives_large_partitions_groups_of_their_own(tmp_path) -> None:
    client = create(str(tmp_path / "t"))
    big = [("dbig", f"k{i:04d}") for i in range(600)]
    small = [(f"ds{j}", f"k{i:04d}") for j in range(6) for i in range(20)]  # same key texts
    client.upsert(batch(big + small, 1))
    client.reindex(groups=8)
    spans = client.metadata.read_point().spans
    # 720 entries over 8 groups: a share of 90; the big day needs ceil(600 / 90) = 7 groups
    assert spans == {"day=dbig": [0, 7]}
    live = where_keys_live(client)
    assert live["day=dbig"] == set(range(7))  # spread over its own span, nowhere else
    assert all(len(live[f"day=ds{j}"]) == 1 for j in range(6))  # a small day: one group
    d3 = client.lookup(["k0003", "k0599"], partition={"day": "ds3"})
    assert d3["k0003"].partition == "day=ds3" and d3["k0599"] is None  # type: ignore[union-attr]
    # writes after the reindex route by its spans; reads, lookups and validate agree
    client.upsert(batch([("dbig", "k9999"), ("dnew", "k0001")], 2))
    live = where_keys_live(client)
    assert live["day=dbig"] == set(range(7)) and len(live["day=dnew"]) == 1
    assert client.lookup(["k9999"], partition={"day": "dbig"})["k9999"] is not None
    assert client.validate() == []


def test_the_automatic_resize_spreads_a_partition_that_outgrew_its_group(tmp_path) -> None:
    client = create(
        str(tmp_path / "t"),
        **{
            "metadata.compact.max.log.files": 2,
            "metadata.compact.log.ratio": 0,
            "metadata.record_index.records.per.group": 20,
        },
    )
    model: Model = {}
    for step in range(4):  # one day grows past 2 x 20 entries in its single home group
        pairs = [("d0", f"k{step * 15 + i:03d}") for i in range(15)] + [("d1", f"s{step}")]
        client.upsert(batch(pairs, step))
        model.update(dict.fromkeys(pairs, step))
    point = client.metadata.read_point()
    assert point.reindexed.get("record_index"), "no automatic resize ran"
    assert point.spans["day=d0"][1] >= 2  # d0 (60 keys) now spans several groups
    assert len(where_keys_live(client)["day=d0"]) >= 2
    assert table_state(client) == model
    assert client.validate() == []


def test_cli_lookup_names_the_partition(tmp_path, capsys) -> None:
    import json

    from lakebraid.writers.cli.main import main as cli

    path = str(tmp_path / "t")
    create(path).upsert(batch([("d0", "a"), ("d1", "a")], 1))
    assert cli(["lookup", path, "a", "b", "--partition", "day=d1", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["a"]["partition"] == "day=d1" and found["b"] is None
    assert cli(["lookup", path, "a"]) == 1
    err = capsys.readouterr().err
    assert "partition-scoped" in err and "(in the CLI: --partition day=...)" in err


def test_a_delete_whose_partition_column_has_another_type_is_refused(tmp_path) -> None:
    """A value of another type names another partition path (5 is ``day=5``, "05" is
    ``day=05``): the delete was a silent no-op. Refused as an upsert refuses the type."""
    c = create(str(tmp_path / "t"))
    c.upsert(pa.table({"id": ["k1", "k2"], "day": ["05", "a"], "ts": [1, 1]}))
    timeline = c.timeline()
    with pytest.raises(InputError, match="partition column 'day' has type int64 in the keys"):
        c.delete(pa.table({"id": ["k1"], "day": [5]}))
    assert c.timeline() == timeline
    c.delete(pa.table({"id": ["k1"], "day": pa.array(["05"]).dictionary_encode()}))
    assert [(r["id"], r["day"]) for r in c.read_arrow().to_pylist()] == [("k2", "a")]
