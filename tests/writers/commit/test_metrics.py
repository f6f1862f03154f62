"""Operation metrics in commit bodies (``CommitMetrics``) against a model of what each write
did: rows inserted, updated (moves included, older events not), deleted; files added and
removed and bytes written, from the metadata table's listing before and after; record-index
entries from the keys the model says changed location. Both engines."""

from __future__ import annotations

import random

import msgspec
import pyarrow as pa
import pytest

from lakebraid.metadata.commits import CommitMetadata, read_commit
from lakebraid.writers.client import WriteClient
from lakebraid.writers.commit.metrics import PHASES

pytestmark = pytest.mark.xdist_group("spark")
ENGINES = {"inprocess": {}, "spark": {"write.inprocess.max.rows": 0}}
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


class Model:
    """The table as the test wrote it: key -> (day, ts)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[str, int]] = {}

    def write(self, rows: list[dict]) -> dict[str, int]:
        """Apply an upsert (or insert) batch; what it does: highest ts wins within the batch
        (then the later row); an older event than the stored row changes nothing."""
        best: dict[str, tuple[int, int, dict]] = {}
        for seq, row in enumerate(rows):
            if row["id"] not in best or (row["ts"], seq) > best[row["id"]][:2]:
                best[row["id"]] = (row["ts"], seq, row)
        done = {"inserted": 0, "updated": 0, "deleted": 0, "moved": 0}
        for key, (ts, _, row) in best.items():
            if key not in self.rows:
                done["inserted"] += 1
            elif self.rows[key][1] > ts:
                continue
            else:
                done["updated"] += 1
                done["moved"] += self.rows[key][0] != row["day"]
            self.rows[key] = (row["day"], ts)
        return done

    def delete(self, keys: list[str]) -> dict[str, int]:
        gone = {k for k in keys if k in self.rows}
        for key in gone:
            del self.rows[key]
        return {"inserted": 0, "updated": 0, "deleted": len(gone), "moved": 0}


def frame(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(
        rows, schema=pa.schema([("id", pa.string()), ("day", pa.string()), ("ts", pa.int64())])
    )


def check(client: WriteClient, instant: str, expected: dict[str, int], before: dict) -> None:
    """The body of ``instant`` against the model's counts and the listing's change."""
    inst = next(i for i in client.timeline() if i.time == instant)
    metrics = read_commit(client.table, inst).metrics
    assert metrics is not None
    after = client.files()
    old = {(p, n) for p, files in before.items() for n in files}
    new = {(p, n): size for p, files in after.items() for n, size in files.items()}
    added = {k: v for k, v in new.items() if k not in old}
    assert metrics.rows_inserted == expected["inserted"]
    assert metrics.rows_updated == expected["updated"]
    assert metrics.rows_deleted == expected["deleted"]
    assert metrics.files_added == len(added)
    # a replaced group's old file leaves the listing (a group emptied by deletes too)
    assert metrics.files_removed == len(old - set(new))
    assert metrics.bytes_written == sum(added.values())
    moved = expected["moved"]
    assert metrics.index_entries_written == expected["inserted"] + moved + expected["deleted"]
    assert metrics.metadata_bytes_written > 0
    assert set(metrics.phases_ms) == set(PHASES)
    assert all(isinstance(v, int) and v >= 0 for v in metrics.phases_ms.values())


@pytest.mark.parametrize("engine", ENGINES)
def test_metrics_of_an_upsert_a_delete_and_an_insert_match_the_model(tmp_path, spark, engine):
    options = {"write.target.file.rows": 6, **ENGINES[engine]}
    client = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", spark=spark, **options)
    as_input = (
        (lambda t: spark.createDataFrame(t.to_pandas())) if engine == "spark" else (lambda t: t)
    )
    model = Model()
    rng = random.Random(14)
    first = [{"id": f"k{i:02d}", "day": DAYS[i % 3], "ts": 5} for i in range(20)]
    before = client.files()
    t = client.bulk_insert(as_input(frame(first)))
    check(client, t, model.write(first), before)
    moves = stale = 0
    for round_ in range(3):
        stored = sorted(model.rows)
        mixed = [  # updates (some moving day, some older events, duplicates) and new keys
            {"id": rng.choice(stored), "day": rng.choice(DAYS), "ts": rng.randrange(3, 9)}
            for _ in range(8)
        ] + [{"id": f"n{round_}-{i}", "day": rng.choice(DAYS), "ts": 5} for i in range(4)]
        before = client.files()
        t = client.upsert(as_input(frame(mixed)))
        did = model.write(mixed)
        check(client, t, did, before)
        moves += did["moved"]
        stale += len({r["id"] for r in mixed[:8]}) - did["updated"]  # older events skipped
        doomed = [*rng.sample(sorted(model.rows), 3), "absent-key"]
        before = client.files()
        t = client.delete(doomed)
        check(client, t, model.delete(doomed), before)
        fresh = [{"id": f"i{round_}-{i}", "day": rng.choice(DAYS), "ts": 1} for i in range(5)]
        before = client.files()
        t = client.insert(as_input(frame(fresh)))
        check(client, t, model.write(fresh), before)
    assert moves > 0 and stale > 0  # the batches did move keys and hold older events
    got = client.read_arrow().select(["id", "day", "ts"]).to_pylist()
    assert {r["id"]: (r["day"], r["ts"]) for r in got} == model.rows


def test_a_body_written_before_metrics_decodes_with_none(tmp_path):
    old = b'{"version": 1, "operation": "upsert", "statuses": [], "logs": [], "schema": []}'
    body = msgspec.json.decode(old, type=CommitMetadata)
    assert body.metrics is None
    assert body.operation == "upsert"
