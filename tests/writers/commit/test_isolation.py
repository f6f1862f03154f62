"""A reader in another process during large upserts sees whole commits only."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lakebraid.writers.client import WriteClient

WRITER = """
import os, sys, time
import pyarrow as pa
from lakebraid.writers.client import WriteClient
c = WriteClient.open(sys.argv[1])
n = int(sys.argv[2])
while not os.path.exists(sys.argv[3]):  # the reader has read once
    time.sleep(0.05)
for step in range(1, 6):
    ids = [f"k{i:06d}" for i in range(n)]
    days = [f"d{i % 4}" for i in range(n)]
    c.upsert(pa.table({"id": ids, "day": days, "ts": [step] * n, "v": [step] * n}))
print("done", flush=True)
"""

READER = """
import json, sys, time
from lakebraid.writers.client import WriteClient
c = WriteClient.open(sys.argv[1])
seen = []
deadline = time.time() + 120
while time.time() < deadline:
    rows = c.read_arrow()
    values = sorted(set(rows.column("v").to_pylist()))
    seen.append([rows.num_rows, values])
    open(sys.argv[2], "w").close()
    if values == [5]:
        break
print(json.dumps(seen), flush=True)
"""


@pytest.mark.slow
def test_reader_sees_only_whole_commits(tmp_path, run_python) -> None:
    n = 40_000
    path = str(tmp_path / "t")
    c = WriteClient.create(path, "id", ["day"], "ts", **{"write.target.file.rows": 5000})
    c.insert(
        pa.table(
            {
                "id": [f"k{i:06d}" for i in range(n)],
                "day": [f"d{i % 4}" for i in range(n)],
                "ts": [0] * n,
                "v": [0] * n,
            }
        )
    )
    ready = str(tmp_path / "reader-ready")
    reader = run_python(READER, path, ready)
    writer = run_python(WRITER, path, str(n), ready)
    _, err_w = writer.communicate(timeout=300)
    out_r, err_r = reader.communicate(timeout=300)
    assert writer.returncode == 0, err_w
    assert reader.returncode == 0, err_r
    seen = json.loads(out_r)
    assert len(seen) >= 3, "the reader should have read several times during the writes"
    for rows, values in seen:
        assert rows == n, "a read saw a partial table"
        assert len(values) == 1, f"a read mixed commits: values {values}"
    assert seen[-1][1] == [5]
    assert len({tuple(v) for _, v in seen}) >= 2, "the reader never saw a commit land"
