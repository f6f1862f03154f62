"""The cleaner deletes the temporaries a killed process left under ``.braid/`` once they are
``clean.temporary.retain.hours`` old (``writers.services.leftovers``): a metadata base's
``.inprogress`` file of a compaction killed with SIGKILL, a put-if-absent's dot temporary; it
keeps younger ones and every file that is not a temporary, and the table reads and validates
the same before and after."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa

from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.client import WriteClient
from lakebraid.writers.services.leftovers import is_temporary, sweep_temporaries

FAST_HEARTBEAT = {"heartbeat.interval.ms": 100, "heartbeat.expiry.ms": 1500}
HOUR = 3600.0

KILLED_COMPACTION = """
import os, signal, sys
import lakebraid.metadata.basewrite as basewrite
from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.client import WriteClient
def die(fs, path):
    assert path.endswith(".inprogress") and os.path.getsize(path) > 0
    os.kill(os.getpid(), signal.SIGKILL)  # the base written whole, before its rename
basewrite.check_written = die
MetadataTable(WriteClient.open(sys.argv[1]).table).compact()
"""


def rows(ids: range, ts: int) -> pa.Table:
    return pa.table(
        {"id": [f"k{i:03d}" for i in ids], "day": ["d"] * len(ids), "ts": [ts] * len(ids)}
    )


def temporaries(path: str) -> list[Path]:
    return sorted(p for p in Path(path, ".braid").rglob("*") if is_temporary(p.name))


def test_a_killed_compactions_base_temporary_is_swept_once_old(tmp_path, run_python) -> None:
    path = str(tmp_path / "t")
    WriteClient.create(path, "id", ["day"], "ts", **FAST_HEARTBEAT)
    for n in range(3):
        WriteClient.open(path).upsert(rows(range(n * 10, n * 10 + 20), n))
    proc = run_python(KILLED_COMPACTION, path)
    proc.communicate(timeout=120)
    assert proc.returncode == -9
    left = [p for p in temporaries(path) if p.name.endswith(".inprogress")]
    assert left, "the killed compaction left its base's temporary"
    time.sleep(1.6)  # its heartbeat expires: the next writer recovers the table
    client = WriteClient.open(path)
    client.upsert(rows(range(50, 52), 9))
    before = client.read_arrow().sort_by("id")
    assert client.validate() == []
    table = client.table
    assert sweep_temporaries(table) == []  # young: a live compaction may still rename it
    swept = sweep_temporaries(table, now=time.time() + 7 * HOUR)
    assert sorted(Path(p) for p in swept) == left
    assert temporaries(path) == []
    after = WriteClient.open(path)
    assert after.read_arrow().sort_by("id").equals(before)
    assert after.validate() == []
    assert MetadataTable(after.table).compact() is not None  # and compaction goes on


def test_only_old_temporaries_are_swept(tmp_path) -> None:
    """Dot temporaries in a timeline folder and a metadata partition, a base's ``.inprogress``:
    the old ones go, a young one and files of look-alike names stay."""
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", ["day"], "ts")
    client.upsert(rows(range(10), 1))
    braid = Path(path, ".braid")
    hex32 = "0123456789abcdef" * 2
    old = [
        braid / "global" / f".20261207000000000.commit.requested.{hex32}.tmp",
        braid / "metadata" / "record_index" / f".record_index-0000_1.log.{hex32}.tmp",
        braid / "metadata" / "files" / "files-0000_20261207000000000.parquet.inprogress",
    ]
    young = braid / "global" / f".20261207000000001.commit.requested.{hex32}.tmp"
    kept = [
        braid / "global" / ".hidden",  # a dot file of another form
        braid / "global" / f".x.{hex32[:31]}.tmp",  # 31 hex digits: not ours
        braid / "metadata" / "files" / "notes.inprogress.txt",
    ]
    stamp = time.time() - 7 * HOUR
    for file in [*old, young, *kept]:
        file.write_bytes(b"x")
        if file is not young:
            os.utime(file, (stamp, stamp))
    before = client.read_arrow()
    WriteClient.open(path).clean()  # the cleaner sweeps them, whatever else it finds to do
    assert young.exists() and all(f.exists() for f in kept)
    assert not any(f.exists() for f in old)
    assert WriteClient.open(path).read_arrow().equals(before)
    assert WriteClient.open(path).validate() == []


def test_temporaries_on_an_object_store_are_swept_from_one_listing(s3_url) -> None:
    """On an object store the sweep lists ``.braid/`` once (no local walk) and deletes only
    temporaries, once old (an object's age: its LastModified)."""
    url = s3_url()
    client = WriteClient.create(url, "id", ["day"], "ts")
    client.upsert(rows(range(10), 1))
    fs, braid = client.table.fs, client.table.layout.braid_dir
    hex32 = "0123456789abcdef" * 2
    temporary = f"{braid}/global/.20261207000000000.commit.requested.{hex32}.tmp"
    alike = f"{braid}/global/.x.{hex32[:31]}.tmp"
    for path in (temporary, alike):
        fs.pipe_file(path, b"x")
    assert sweep_temporaries(client.table) == []  # young
    swept = sweep_temporaries(client.table, now=time.time() + 7 * HOUR)
    assert [p.rsplit("/", 1)[-1] for p in swept] == [temporary.rsplit("/", 1)[-1]]
    assert not fs.exists(temporary) and fs.exists(alike)
    assert WriteClient.open(url).validate() == []
