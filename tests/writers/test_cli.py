from __future__ import annotations

import json
import subprocess
import sys

from timeline.instant import Action
from timeline.layout import TimelineKind
from writers.cli import main


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
