"""An S3 table opened with ``storage_options`` alone: a process whose environment names no AWS
endpoint or credentials writes on both engines and reads through ``read()`` and the data
source; Spark executors get the options in their tasks. Bad options are refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakebraid.timeline.errors import ConfigError
from lakebraid.writers.client import WriteClient

pytestmark = pytest.mark.slow
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

CODE = """
import json, sys
import pyarrow as pa
from lakebraid.writers.client import WriteClient
url, options = sys.argv[1], json.loads(sys.argv[2])
c = WriteClient.create(url, "id", ["day"], "ts", storage_options=options)
rows = pa.table({"id": ["a", "b", "c"], "day": ["d1", "d1", "d2"], "ts": [1, 1, 1], "v": [1, 2, 3]})
first = c.bulk_insert(rows)
c = WriteClient.open(url, storage_options=options, **{"write.inprocess.max.rows": 0})
change = pa.table({"id": ["b", "d"], "day": ["d2", "d2"], "ts": [2, 2], "v": [20, 40]})
c.upsert(c.spark.createDataFrame(change.to_pandas()))
source = (c.spark.read.format("lakebraid").option("storage_options", json.dumps(options))
          .load(url))
print(json.dumps({
    "read": sorted((r["id"], r["day"], r["v"]) for r in c.read().collect()),
    "as_of": sorted(r["id"] for r in c.read(as_of=first).collect()),
    "source": sorted((r["id"], r["v"]) for r in source.collect()),
    "lookup": c.lookup(["b"])["b"].partition,
    "problems": c.validate(),
}))
"""


def test_storage_options_alone_reach_every_process(loopback_s3, s3_url, tmp_path) -> None:
    url = s3_url()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    # the JVM options of the tests' own session (conftest.py): a short-lived JVM starts faster
    env["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options '{QUICK_JVM}' pyspark-shell"
    done = subprocess.run(
        [sys.executable, "-c", CODE, url, json.dumps(loopback_s3.storage_options())],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["read"] == [["a", "d1", 1], ["b", "d2", 20], ["c", "d2", 3], ["d", "d2", 40]]
    assert seen["as_of"] == ["a", "b", "c"]
    assert seen["source"] == [["a", 1], ["b", 20], ["c", 3], ["d", 40]]
    assert seen["lookup"] == "day=d2"
    assert seen["problems"] == []


def test_storage_options_that_cannot_ship_are_refused(s3_url) -> None:
    with pytest.raises(ConfigError, match=r"storage_options .* must be plain values"):
        WriteClient.create(s3_url(), "id", storage_options={"config_kwargs": object()})


def test_a_small_upsert_asks_no_sizes_and_stays_in_its_request_budget(loopback_s3, s3_url):
    """A 1,000-row upsert into one partition of an S3 table (issue 13's goal: at most 60
    requests): base and data files are opened with the sizes the listings gave, so no HEAD."""
    import pyarrow as pa

    from lakebraid.metadata.basefile import FOOTERS, SIZES

    url = s3_url()
    keys = [f"k{i:05d}" for i in range(20_000)]
    days = [f"d{i % 10}" for i in range(20_000)]
    rows = pa.table({"id": keys, "day": days, "ts": [1] * 20_000, "v": list(range(20_000))})
    WriteClient.create(url, "id", ["day"], "ts").bulk_insert(rows)
    changed = rows.filter(pa.compute.equal(rows["day"], "d3")).slice(0, 1000)
    changed = changed.set_column(3, "v", pa.array([-1] * len(changed), pa.int64()))
    FOOTERS.clear()  # as a new process would: nothing known of the files
    SIZES.clear()
    client = WriteClient.open(url)
    with loopback_s3.counting() as counting:
        client.upsert(changed)
    assert counting.counts["HEAD"] == 0, counting.counts
    assert counting.total <= 60, counting.counts
    got = dict(zip(*client.read_arrow().select(["id", "v"]).to_pydict().values(), strict=True))
    assert sum(v == -1 for v in got.values()) == len(changed) == 1000
    assert len(got) == 20_000
