from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pyarrow as pa
import pytest

from lakebraid.timeline.instant import Action
from lakebraid.timeline.layout import TimelineKind
from lakebraid.writers.cli.loopback_s3 import CREDENTIALS
from lakebraid.writers.cli.main import build_parser, main
from lakebraid.writers.client import WriteClient


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


def test_recover_command_rolls_back_a_dead_writers_commit(tmp_path, capsys) -> None:
    client = WriteClient.create(str(tmp_path / "t"), record_key="k")
    client.upsert(pa.table({"k": ["a"]}))
    table = client.table
    dead = table.next_time()  # requested by a writer that died before its first heartbeat
    for kind, action in ((TimelineKind.GLOBAL, Action.COMMIT), (TimelineKind.DATA, Action.COMMIT)):
        table.store.request(kind, dead, action)
    table.store.request(TimelineKind.METADATA, dead, Action.DELTACOMMIT)
    assert main(["recover", client.path]) == 0
    assert capsys.readouterr().out.strip() == f"settled {dead}"
    assert dead in WriteClient.open(client.path).table.visibility().undone
    assert main(["recover", client.path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"recovered": []}
    assert WriteClient.open(client.path).read_arrow()["k"].to_pylist() == ["a"]


def test_missing_table_one_line_reason_nonzero(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lakebraid.writers.cli.main", "timeline", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "no lakebraid table" in proc.stderr


def test_unreachable_storage_one_line_reason_nonzero() -> None:
    """No server listens at the endpoint: the S3 client's error, after its retries, is one
    line saying the storage failed and that nothing committed is lost."""
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    proc = subprocess.run(
        [sys.executable, "-m", "lakebraid.writers.cli.main", "show", "s3://bucket/t"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "the storage failed" in proc.stderr and f"127.0.0.1:{port}" in proc.stderr


def test_lookup_files_and_rollback_round_trip_as_subprocesses(tmp_path) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    c.insert(pa.table({"id": ["a", "b"], "day": ["d1", "d2"], "ts": [1, 1]}))
    second = c.upsert(pa.table({"id": ["a"], "day": ["d1"], "ts": [2]}))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "lakebraid.writers.cli.main", *args],
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


def test_version_and_help_on_every_argument(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("lakebraid ")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, cmd in sub.choices.items():  # type: ignore[union-attr]
        for action in cmd._actions:
            assert action.help, f"lakebraid {name}: {action.dest} has no help text"


def test_cli_as_of_is_checked_and_keys_take_the_key_type(tmp_path, capsys) -> None:
    c = WriteClient.create(str(tmp_path / "t"), "id", precombine="ts")
    c.upsert(pa.table({"id": [7, 8], "ts": [1, 1]}))
    assert main(["lookup", c.path, "7", "9", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["7"] is not None and found["9"] is None
    assert main(["lookup", c.path, "7", "--as-of", "yesterday"]) == 1
    assert "read point" in capsys.readouterr().err
    assert main(["files", c.path, "--as-of", "2001-01-01"]) == 1
    assert "before the table was created" in capsys.readouterr().err


def test_demo_refuses_to_delete_a_folder_it_did_not_make(tmp_path) -> None:
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    other = WriteClient.create(str(tmp_path / "trips"), "id", precombine="ts")
    for path in (precious, tmp_path / "trips"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "lakebraid.writers.cli.demo",
                "--path",
                str(path),
                "--rows",
                "100",
            ],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2 and "--force" in proc.stderr, proc.stderr
    assert (precious / "thesis.tex").read_text() == "years of work"
    assert WriteClient.open(other.path).table.config.record_key == "id"
