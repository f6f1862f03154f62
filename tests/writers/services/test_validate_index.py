"""validate()'s record-index comparison (``writers.services.validate_index``): the current
keys against a real table's index, each planted difference reported once with the message
the old per-key comparison gave, and keys in two groups against a dictionary model."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.index.lookup import locations
from lakebraid.index.scope import is_scoped
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.layout import parse_data_file_name
from lakebraid.writers.client import WriteClient
from lakebraid.writers.services.validate_index import compare_index, current_keys

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def table(path: Path, scope: str = "global") -> WriteClient:
    client = WriteClient.create(
        str(path), "id", ["day"], "ts", index_scope=scope, **{"write.target.file.rows": 40}
    )
    n = 150
    client.bulk_insert(
        pa.table(
            {
                "id": [f"k{i:04d}" for i in range(n)],
                "day": [DAYS[i % 3] for i in range(n)],
                "ts": list(range(n)),
            }
        )
    )
    client.upsert(pa.table({"id": ["k0001", "k9000"], "day": [DAYS[1], DAYS[2]], "ts": [7, 7]}))
    return client


def groups_of(client: WriteClient) -> dict[tuple[str, str], pa.Array]:
    """Each current file's index keys, read straight from the files."""
    scoped = is_scoped(client.table.config)
    out = {}
    for partition, names in client.files().items():
        for name in names:
            keys = pq.read_table(Path(client.path) / partition / name, columns=["id"])
            texts = keys.column("id").to_pylist()
            if scoped:
                texts = [f"{partition}\x00{k}" for k in texts]
            out[(partition, parse_data_file_name(name).file_id)] = pa.array(texts, pa.string())
    return out


def problems(client: WriteClient, groups, damaged=()) -> list[str]:
    current, owners, repeated = current_keys(groups)
    reader = MetadataTable(client.table).reader()
    return repeated + compare_index(reader, current, owners, damaged)


@pytest.mark.parametrize("scope", ["global", "partition"])
def test_a_sound_table_has_no_problem(tmp_path: Path, scope: str) -> None:
    client = table(tmp_path / "t", scope)
    groups = groups_of(client)
    assert len(groups) > 3
    assert problems(client, groups) == []
    assert client.validate() == []


def test_each_planted_difference_is_reported_once(tmp_path: Path) -> None:
    client = table(tmp_path / "t")
    groups = groups_of(client)
    owners = sorted(groups)
    (p0, f0), (p1, f1) = owners[0], next(g for g in owners if g[0] != owners[0][0])
    first, second = groups[(p0, f0)].to_pylist(), groups[(p1, f1)].to_pylist()
    gone, moved, renamed = first[0], first[1], first[2]
    left = [k for k in first if k not in (gone, moved, renamed)]
    groups[(p0, f0)] = pa.array([*left, "k-new"])
    groups[(p1, f1)] = pa.array([*second, moved])
    groups[(p1, f0)] = pa.array([renamed])  # the same file id in another partition
    where = locations(MetadataTable(client.table).reader(), [moved, renamed])
    assert {(w.partition, w.file_id) for w in where.values()} == {(p0, f0)}
    assert sorted(problems(client, groups)) == sorted(
        [
            f"record_index: key 'k-new' is in {p0} file group {f0}, the index says None",
            f"record_index: key {moved!r} is in {p1} file group {f1}, the index says "
            f"{where[moved]}",
            f"record_index: key {renamed!r} is in {p1} file group {f0}, the index says "
            f"{where[renamed]}",
            f"record_index: key {gone!r} is indexed but in no visible file",
        ]
    )
    # the index's entries of a damaged group are not reported again
    assert problems(client, groups, damaged={(p0, f0)}) == [
        p for p in problems(client, groups) if "no visible file" not in p
    ]


def test_a_key_in_two_groups_is_reported_and_the_later_group_keeps_it(tmp_path: Path) -> None:
    client = table(tmp_path / "t")
    groups = groups_of(client)
    owners = sorted(groups)
    (p0, f0), (p1, f1) = owners[0], owners[-1]
    twice = groups[(p0, f0)].to_pylist()[0]
    groups[(p1, f1)] = pa.array([*groups[(p1, f1)].to_pylist(), twice])
    found = problems(client, groups)
    assert found[0] == f"record key {twice!r} is in two files"
    assert found[1:] == [
        f"record_index: key {twice!r} is in {p1} file group {f1}, the index says "
        f"{locations(MetadataTable(client.table).reader(), [twice])[twice]}"
    ]


KEYS = st.lists(st.sampled_from([f"k{i}" for i in range(12)] + ["", "é"]), max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.tuples(st.sampled_from("ab"), st.sampled_from("xyz")), KEYS))
def test_keys_met_again_against_a_dictionary_model(groups: dict) -> None:
    """Keys repeated across groups and within one: one problem per occurrence after the
    first, naming the group when it is the same one; the last group keeps the key."""
    model: dict[str, tuple[str, str]] = {}
    expected = []
    for group in sorted(groups):
        for key in groups[group]:
            if model.get(key) == group:
                expected.append(f"record key {key!r} is twice in {group[0]} file group {group[1]}")
            elif key in model:
                expected.append(f"record key {key!r} is in two files")
            model[key] = group
    arrays = {g: pa.array(keys, pa.string()) for g, keys in groups.items()}
    current, owners, repeated = current_keys(arrays)
    assert sorted(repeated) == sorted(expected)
    got = dict(
        zip(
            current.column("key").to_pylist(),
            (owners[o] for o in current.column("owner").to_pylist()),
            strict=True,
        )
    )
    assert got == model


def test_validate_reports_a_data_file_holding_a_key_twice(tmp_path: Path) -> None:
    """A file group holds each key once: a file rewritten with a row repeated (say by a
    foreign writer) is a problem naming the key and the group, not silently one key."""
    client = table(tmp_path / "t")
    partition, names = sorted(client.files().items())[0]
    name = sorted(names)[0]
    path = Path(client.path) / partition / name
    rows = pq.read_table(path)
    pq.write_table(pa.concat_tables([rows, rows.slice(3, 1)]), path)
    key = rows.column("id")[3].as_py()
    file_id = parse_data_file_name(name).file_id
    assert f"record key {key!r} is twice in {partition} file group {file_id}" in client.validate()


def test_an_entry_in_a_group_its_key_does_not_route_to_is_reported_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is looked for where its hash routes it (missing there), and its entry found
    in another group is not also reported as a key of no file: the key is in a file."""
    client = WriteClient.create(
        str(tmp_path / "t"),
        "id",
        ["day"],
        "ts",
        **{"index.expected.records": 40, "metadata.record_index.records.per.group": 10},
    )
    ids = [f"k{i}" for i in range(40)]
    client.bulk_insert(pa.table({"id": ids, "day": [DAYS[0]] * 40, "ts": [1] * 40}))
    reader = MetadataTable(client.table).reader()
    groups = groups_of(client)
    ((owner, keys),) = groups.items()
    key = keys.to_pylist()[5]
    route = type(reader.point).index_groups
    n = reader.point.group_counts["record_index"]
    assert n >= 2

    def elsewhere(point, asked):  # the key's entry sits in the group after its own
        found = route(point, asked)
        found[pa.array(asked).to_pylist().index(key)] += 1
        return found % n

    monkeypatch.setattr(type(reader.point), "index_groups", elsewhere)
    current, owners, repeated = current_keys(groups)
    assert repeated == []
    assert compare_index(reader, current, owners) == [
        f"record_index: key {key!r} is in {owner[0]} file group {owner[1]}, the index says None"
    ]
