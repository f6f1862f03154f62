"""The soak run, short (``benchmarks/soak.py --commits 120``): two writer processes, one killed
with SIGKILL and restarted, a reader checking as-of reads; the table equals the model of the
writes that returned success, ``validate()`` is clean and files on disk stay bounded. On a
copy-on-write table and on a merge-on-read one, whose writers append logs and compact groups
(inline, after every third log) while the other writer appends to them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
DAYS = 10  # benchmarks/soak.py's day partitions


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_soak_120_commits(tmp_path: Path, table_type: str) -> None:
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "soak.py"),
            "--commits",
            "120",
            "--kill-every",
            "12",
            "--dir",
            str(tmp_path),
            "--json",
            str(out),
            "--table-type",
            table_type,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.exists(), done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["failures"] == [], result["failures"]
    assert done.returncode == 0
    assert result["commits"] >= 120 and result["kills"] >= 1
    assert result["reader"]["checks"] >= 5 and result["reader"]["mismatches"] == 0
    operations = result["operations"]
    assert operations.get("upsert", 0) > 0 and operations.get("delete", 0) > 0, operations
    if table_type == "merge_on_read":  # the logs were folded while the writers went on
        assert operations.get("compaction", 0) >= 5, operations
    files = result["files_at_end"]
    # counted once a killed writer's instant is recovered and the inline services ran again
    # (soak.settle_dead_writers), archival keeps at most archive.max.instants (40) + the
    # writers' pending instants per timeline folder, three files each; the cleaner keeps
    # clean.retain.commits (10) plus clean.inline.every.commits (10) commits' slices of each
    # day partition (a commit adds one file to a partition's group: a base, or a log)
    for folder in (".braid/global", ".braid/timeline"):
        assert files.get(folder, 0) <= 3 * (40 + 4), files
    assert files["data"] <= DAYS * (10 + 10 + 2), files
