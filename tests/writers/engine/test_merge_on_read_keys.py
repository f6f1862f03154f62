"""Key-equality reads of a merge-on-read table: ``read(where="id = ...")`` and ``id in (...)``
plan only the file groups the record index names for those keys, and read of each such slice
only the log blocks whose footers may hold them (RFC-06's key index); the rows equal those of
the full snapshot read for every key, whether stored, updated, deleted, moved or absent."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from table_fixtures import DAYS
from table_fixtures import random_batch as batch

from lakebraid.index import datalog
from lakebraid.metadata.commits import schema_as_of
from lakebraid.writers.client import WriteClient
from lakebraid.writers.read import plan
from lakebraid.writers.write import slices
from lakebraid.writers.write.datafile import spec_of, virtual_key

pytestmark = pytest.mark.xdist_group("spark")
COLUMNS = ["id", "day", "ts", "amount"]


@pytest.fixture(scope="module")
def table(tmp_path_factory, spark) -> WriteClient:
    rng = random.Random(21)
    path = str(tmp_path_factory.mktemp("keys") / "mor")
    options = {"compaction.inline": False, "write.target.file.rows": 40}
    c = WriteClient.create(
        path, "id", ["day"], "ts", table_type="merge_on_read", spark=spark, **options
    )
    keys = [f"k{i:03d}" for i in range(120)]
    first = pa.table(
        {
            "id": keys,
            "day": [DAYS[i % 3] for i in range(120)],
            "ts": [0] * 120,
            "amount": [float(i) for i in range(120)],
        }
    )
    c.bulk_insert(first)
    for step in range(6):  # several logs per group, keys moving between days
        c.upsert(batch(rng, keys[: 60 + 10 * step], 15, 10 * (step + 1)))
        if step % 2:
            c.delete(rng.sample(keys, 5))
    return c


def snapshot(c: WriteClient) -> dict[str, tuple]:
    return {r["id"]: (r["day"], r["ts"], r["amount"]) for r in c.read_arrow().to_pylist()}


def test_key_equality_reads_equal_the_snapshot_for_every_kind_of_key(table) -> None:
    everything = snapshot(table)
    probes = ["k000", "k005", "k059", "k119", "absent", *sorted(everything)[::17]]
    for key in probes:
        got = table.read(where=f"id = '{key}'").select(*COLUMNS).collect()
        want = [(key, *everything[key])] if key in everything else []
        assert [tuple(r) for r in got] == want, key
    wanted = ["k001", "k050", "k100", "nope"]
    listed = ", ".join(f"'{k}'" for k in wanted)
    got = table.read(where=f"id in ({listed})").select(*COLUMNS).collect()
    assert sorted(tuple(r) for r in got) == sorted(
        (k, *everything[k]) for k in wanted if k in everything
    )


def test_a_key_read_plans_its_group_alone_and_skips_log_blocks_without_it(
    table, monkeypatch
) -> None:
    everything = snapshot(table)
    key = next(k for k in sorted(everything) if k > "k030")
    point = table.table.read_point(None)
    everywhere = plan.plan_units(table.table, point)
    units = plan.selected_units(table.table, table.spark, point, f"id = '{key}'")
    assert len(units) == 1 < len(everywhere)
    (unit,) = units
    assert unit.logs, "the key's group has no log: the table fixture should give it some"
    assert unit.keys == (key,)
    decoded: list[str] = []
    real = datalog.decode_block

    def counting(data, offset, path, **checks):
        decoded.append(path)
        return real(data, offset, path, **checks)

    monkeypatch.setattr(datalog, "decode_block", counting)
    fields = schema_as_of(table.table, point)
    derive = virtual_key(spec_of(fields), table.table.config.record_key)
    schema = plan.table_schema(fields)
    rows = slices.read_unit(table.table.fs, unit, schema, derive, None)
    assert {r["id"]: (r["day"], r["ts"], r["amount"]) for r in rows.to_pylist()} == {
        key: everything[key]
    }
    read_all = len(decoded)
    decoded.clear()
    slices.read_unit(table.table.fs, slices.ReadUnit(unit.base, unit.logs), schema, derive, None)
    assert read_all < len(decoded), "no log block was skipped"
