"""A record-index lookup skips a slice whose files' key ranges its keys miss
(``indexfold.misses_slice``): keys past every stored one (appends of growing ids) are looked
up without sorting or matching them, and no stored key is ever missed, whatever the ranges
of the base and of each log (property test against a model of the keys written)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakebraid.index import lookup
from lakebraid.metadata import reader as reader_module
from lakebraid.metadata.indexfold import misses_slice
from lakebraid.metadata.records import Partition
from lakebraid.writers.client import WriteClient

ALPHABET = ["", "a", "b", "m", "z", "\u00e9", "\U0001f600", "0"]
texts = st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=3).map("".join)


def slices(client: WriteClient) -> list:
    reader = client.metadata.reader()
    folder = reader.folder(Partition.RECORD_INDEX)
    count = reader.group_count(Partition.RECORD_INDEX)
    return [(reader, folder, reader.slice(Partition.RECORD_INDEX, i)) for i in range(count)]


def test_keys_past_every_stored_key_are_looked_up_without_a_sort(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five appends of growing ids, the index compacted on the way (a base and logs): the
    next batch's keys miss every slice, so the lookup never sorts them; a stored key among
    them is found (the slice holding it is searched)."""
    path = str(tmp_path / "t")
    options = {"metadata.compact.max.log.files": 3, "metadata.record_index.min.groups": 2}
    WriteClient.create(path, "id", [], None, **options)
    for batch in range(5):
        ids = [f"ev-{i:06d}" for i in range(batch * 1000, (batch + 1) * 1000)]
        WriteClient.open(path).bulk_insert(pa.table({"id": ids, "v": list(range(1000))}))
    client = WriteClient.open(path)
    pieces = slices(client)
    assert any(p.base is not None for _, _, p in pieces)
    assert any(p.logs for _, _, p in pieces)
    fresh = pa.array([f"ev-{i:06d}" for i in range(5000, 6000)])
    for reader, folder, piece in pieces:
        assert misses_slice(reader.fs, folder, piece, fresh)

    def no_sort(*args: object, **kwargs: object) -> None:
        raise AssertionError("a missed slice's keys were sorted")

    monkeypatch.setattr(reader_module, "wanted_keys", no_sort)
    found = lookup.lookup(client.metadata.reader(), fresh)
    assert found.num_rows == 0
    monkeypatch.undo()
    stored = pa.array(["ev-005500", "ev-000999"])
    assert lookup.lookup(client.metadata.reader(), stored).column("key").to_pylist() == [
        "ev-000999"
    ]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(st.sets(texts, min_size=1, max_size=6), min_size=1, max_size=6),
    probes=st.lists(st.sets(texts, min_size=1, max_size=6), min_size=1, max_size=4),
    compact_every=st.sampled_from([1, 2, 8]),
)
def test_a_missed_slice_holds_none_of_the_keys(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[set[str]],
    probes: list[set[str]],
    compact_every: int,
) -> None:
    """Keys at, between and beyond the files' bounds (empty, multi-byte, astral): a slice
    said missed holds none of them, and a lookup finds exactly the stored ones."""
    path = str(tmp_path_factory.mktemp("miss") / "t")
    options = {"metadata.compact.max.log.files": compact_every}
    WriteClient.create(path, "id", [], None, **options)
    held: set[str] = set()
    for batch in batches:
        rows = pa.table({"id": sorted(batch), "v": list(range(len(batch)))})
        WriteClient.open(path).upsert(rows)
        held |= batch
    client = WriteClient.open(path)
    reader = client.metadata.reader()
    edges = [{edge} for batch in batches for edge in (min(batch), max(batch))]
    for probe in [*probes, *edges]:  # each file's least and greatest key alone, too
        keys = pa.array(sorted(probe), pa.string())
        for _, folder, piece in slices(client):
            if misses_slice(reader.fs, folder, piece, keys):
                in_slice = lookup.lookup(reader, keys)
                groups = {reader.point.index_groups(pa.array([k]), None)[0] for k in probe & held}
                index = int(piece.file_group.rsplit("-", 1)[1])
                assert index not in groups
                assert set(in_slice.column("key").to_pylist()) == probe & held
        assert set(lookup.lookup(reader, keys).column("key").to_pylist()) == probe & held
