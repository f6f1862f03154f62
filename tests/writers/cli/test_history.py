"""``lakebraid history`` / ``lakebraid show`` (and ``WriteClient.history`` / ``show``) against a
model of what the test did: the instants it made in order, the rows each write changed, the
files and bytes on disk (walked with ``os``), the keys the table holds; bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from lakebraid.writers.cli.main import main
from lakebraid.writers.client import WriteClient

OPTIONS = {"metadata.compact.max.log.files": 0}  # no inline compaction: the test makes them


def rows(ids: list[str], days: list[str], ts: int) -> pa.Table:
    return pa.table({"id": ids, "day": days, "ts": [ts] * len(ids), "v": list(range(len(ids)))})


@pytest.fixture
def story(tmp_path):
    """A table and what was done to it: (client, model, made) where ``made`` lists
    (instant, action, operation, expected metrics or None) oldest first."""
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts", **OPTIONS)
    ids = [f"k{i}" for i in range(12)]
    days = [f"2024-01-0{1 + i % 3}" for i in range(12)]
    model = dict(zip(ids, days, strict=True))
    made = []
    t1 = c.bulk_insert(rows(ids, days, 1))
    made.append((t1, "commit", "bulk_insert", (12, 0, 0)))
    # k0, k1 updated in place, k2 moves day, k90 and k91 are new
    t2 = c.upsert(
        rows(
            ["k0", "k1", "k2", "k90", "k91"],
            [days[0], days[1], "2024-01-09", "2024-01-01", "2024-01-02"],
            2,
        )
    )
    model.update({"k2": "2024-01-09", "k90": "2024-01-01", "k91": "2024-01-02"})
    made.append((t2, "commit", "upsert", (2, 3, 0)))
    sp = c.savepoint(t2)
    made.append((sp, "savepoint", "savepoint", None))
    t3 = c.delete(["k5", "k6", "absent"])
    made.append((t3, "commit", "delete", (0, 0, 2)))
    rb = c.rollback(t3)
    made.append((rb, "rollback", "rollback", None))
    compaction = c.compact_metadata()
    made.append((compaction, "compaction", "compaction", None))
    return c, model, made


def test_history_lists_every_completed_instant_newest_first_with_its_metrics(story):
    c, _, made = story
    got = c.history()
    assert [(r["time"], r["action"], r["operation"]) for r in got] == [
        (t, action, op) for t, action, op, _ in reversed(made)
    ]
    t3 = made[3][0]
    for row, (time, _, _, counts) in zip(got, reversed(made), strict=True):
        assert row["state"] == ("undone" if time == t3 else "completed")
        if counts is None:
            assert row["metrics"] is None
        else:
            m = row["metrics"]
            assert (m["rows_inserted"], m["rows_updated"], m["rows_deleted"]) == counts
    assert got[1]["details"]["target"] == t3  # the rollback names what it undid
    assert got[3]["details"]["target"] == made[1][0]  # the savepoint names its commit
    completions = [r["completion_time"] for r in got]
    assert completions == sorted(completions, reverse=True)
    assert c.history(limit=2) == got[:2]


def test_history_cli_text_json_and_limit(story, capsys):
    c, _, made = story
    assert main(["history", c.path, "--json", "--limit", "3"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["time"] for r in listed] == [t for t, *_ in reversed(made)][:3]
    assert main(["history", c.path]) == 0
    text = capsys.readouterr().out
    lines = [line for line in text.splitlines() if line[:1].isdigit()]
    assert len(lines) == len(made)
    upsert = next(line for line in lines if " upsert " in line)
    assert upsert.split()[4:7] == ["2", "3", "0"]  # +rows ~rows -rows of the model


@pytest.mark.parametrize("limit", ["0", "-2"])
def test_history_refuses_a_limit_below_one(story, capsys, limit):
    c, _, _ = story
    assert main(["history", c.path, "--limit", limit]) == 1
    err = capsys.readouterr().err
    assert "limit must be a positive whole number" in err and c.path in err


def test_history_and_show_of_a_missing_table_and_an_empty_one(tmp_path, capsys):
    for command in ("history", "show"):
        assert main([command, str(tmp_path / "nope")]) == 1
        assert "no lakebraid table at" in capsys.readouterr().err
    c = WriteClient.create(str(tmp_path / "e"), "id", ["day"], "ts")
    assert main(["history", c.path]) == 0
    assert "no completed instants yet" in capsys.readouterr().out
    assert main(["history", c.path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["show", c.path, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["data"]["files"], shown["data"]["rows"], shown["data"]["partitions"]) == (0, 0, 0)


def walk(root: Path) -> dict[str, tuple[int, int]]:
    """(files, bytes) by the part of the table, walked with os."""
    found: dict[str, list[int]] = {}
    for folder, _, names in os.walk(root):
        rel = Path(folder).relative_to(root).as_posix()
        if not rel.startswith(".braid"):
            part = "data"
        elif rel.startswith(".braid/metadata/.braid/timeline"):
            part = "timeline: metadata"
        elif rel.startswith(".braid/metadata/"):
            part = f"metadata: {rel.split('/')[2]}"
        elif rel in (".braid/global", ".braid/timeline"):
            part = "timeline: " + ("global" if rel.endswith("global") else "data")
        else:
            part = ".braid: other"
        slot = found.setdefault(part, [0, 0])
        for name in names:
            slot[0] += 1
            slot[1] += (Path(folder) / name).stat().st_size
    return {k: (v[0], v[1]) for k, v in found.items() if v[0]}


def test_show_against_the_model_and_the_disk(story, capsys):
    c, model, made = story
    c.create_index("v")
    shown = c.show()
    data = shown["data"]
    paths = c.file_paths()
    assert data["rows"] == len(model)
    assert data["partitions"] == len(set(model.values()))
    assert data["files"] == len(paths)
    assert data["bytes"] == sum(os.path.getsize(p) for p in paths)
    per_day = {f"day={d}": sum(1 for v in model.values() if v == d) for d in set(model.values())}
    assert {p: v["rows"] for p, v in data["by_partition"].items()} == per_day
    disk = walk(Path(c.path))
    got = {k: (v["files"], v["bytes"]) for k, v in shown["bytes_on_disk"]["by_part"].items()}
    assert got == disk
    ri = shown["record_index"]  # compacted: every entry is in a base, no log since
    assert (ri["base_entries"], ri["log_records"]) == (len(model), 0)
    assert list(shown["indexes"]["secondary"]) == ["v"]
    t = shown["table"]
    assert (t["record_key"], t["partition_fields"], t["precombine_field"]) == ("id", ["day"], "ts")
    assert [f["name"] for f in t["schema"]] == ["id", "day", "ts", "v"]
    services = shown["services"]
    assert services["last"]["compaction"]["time"] == made[5][0]
    assert services["last"]["clean"] is None
    assert services["savepoints"] == [made[1][0]]
    assert main(["show", c.path]) == 0
    text = capsys.readouterr().out
    assert f"{len(paths)} files, {len(model)} rows" in text
    assert "secondary indexes: v=built" in text


def test_show_of_a_merge_on_read_table_counts_base_and_log_rows(tmp_path, capsys):
    """Partitions with logs show their base rows and the logs' data rows (unmerged: deletes
    not subtracted); after a compaction the exact rows again."""
    c = WriteClient.create(str(tmp_path / "m"), "id", ["day"], "ts", table_type="merge_on_read")
    ids = [f"k{i:02d}" for i in range(40)]
    days = ["2024-01-01" if i % 4 else "2024-01-02" for i in range(40)]  # 30 and 10 rows
    c.bulk_insert(rows(ids, days, 1))
    c.upsert(rows(["k01", "k02", "k04"], [days[1], days[2], days[4]], 2))  # updates: 2 + 1
    c.delete(["k05", "k08"])  # one row of each day
    data = c.show()["data"]
    got = {p: (v["rows"], v["base_rows"], v["log_rows"]) for p, v in data["by_partition"].items()}
    assert got == {"day=2024-01-01": (None, 30, 2), "day=2024-01-02": (None, 10, 1)}
    assert (data["rows"], data["base_rows"], data["log_rows"]) == (None, 40, 3)
    assert main(["show", c.path]) == 0
    text = capsys.readouterr().out
    assert "day=2024-01-01: 3 files, 30 base rows + 2 log rows (not merged)" in text  # + 2 logs
    c.compact()
    data = c.show()["data"]
    got = {p: (v["rows"], v["log_rows"]) for p, v in data["by_partition"].items()}
    assert got == {"day=2024-01-01": (29, 0), "day=2024-01-02": (9, 0)}
    assert data["rows"] == len(c.read_arrow()) == 38
