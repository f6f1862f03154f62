from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa

from timeline.instant import Action
from timeline.layout import TimelineKind
from writers.cli import main
from writers.client import WriteClient


def test_timeline_command_json_and_text(new_table, capsys) -> None:
    table = new_table()
    t = table.next_time()
    table.store.request(TimelineKind.GLOBAL, t, Action.COMMIT)
    assert main(["timeline", table.path, "--which", "global", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["global"] == [
        {
            "time": t,
            "action": "commit",
            "state": "requested",
            "completion_time": None,
            "visible": False,
        }
    ]
    assert main(["timeline", table.path]) == 0
    text = capsys.readouterr().out
    assert "global timeline" in text and "metadata timeline" in text and t in text


def test_missing_table_one_line_reason_nonzero(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "writers.cli", "timeline", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "no lakebraid table" in proc.stderr


def test_lookup_files_and_rollback_round_trip_as_subprocesses(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    c.insert(pa.table({"id": ["a", "b"], "day": ["d1", "d2"], "ts": [1, 1]}))
    second = c.upsert(pa.table({"id": ["a"], "day": ["d1"], "ts": [2]}))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "writers.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    found = run("lookup", c.path, "a", "zz", "--json")
    assert found.returncode == 0, found.stderr
    located = json.loads(found.stdout)
    assert located["zz"] is None and located["a"]["partition"] == "day=d1"
    assert located["a"]["file_id"] == c.lookup(["a"])["a"].file_id
    listing = run("files", c.path, "--json")
    assert json.loads(listing.stdout) == c.files()
    old = run("files", c.path, "--as-of", c.timeline()[0].completion_time, "--json")
    assert json.loads(old.stdout) == c.files(as_of=c.timeline()[0].completion_time)
    undo = run("rollback", c.path, second, "--json")
    assert undo.returncode == 0, undo.stderr
    assert json.loads(undo.stdout)["rolled_back"] == second
    again = run("rollback", c.path, second)
    assert again.returncode == 1 and "already rolled back" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert c.read_arrow().sort_by("id").column("ts").to_pylist() == [1, 1]
    first = c.timeline()[0].time
    mark = run("savepoint", c.path, first, "--json")
    assert mark.returncode == 0, mark.stderr
    assert json.loads(mark.stdout)["target"] == first
    c.upsert(pa.table({"id": ["c"], "day": ["d3"], "ts": [3]}))
    back = run("restore", c.path, first, "--json")
    assert back.returncode == 0, back.stderr
    assert sorted(c.read_arrow().column("id").to_pylist()) == ["a", "b"]
    compacted = run("compact", c.path, "--json")
    assert compacted.returncode == 0 and json.loads(compacted.stdout)["compaction"]
    cleaned = run("clean", c.path, "--json")
    assert cleaned.returncode == 0 and "clean" in json.loads(cleaned.stdout)
    checked = run("validate", c.path, "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout) == {"problems": []}
    missing = run("lookup", str(tmp_path / "none"), "a")
    assert missing.returncode == 1 and "no lakebraid table" in missing.stderr
