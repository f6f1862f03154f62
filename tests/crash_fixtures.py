"""What the crash tests share: the rows and operations they run, and the killer process (a
writer that SIGKILLs itself right after a chosen step; see tests/writers/test_crash_matrix.py).

Kill points: ``<step>:<timeline>`` (after an instant file of the operation's actions is written
on that timeline), ``mid-data-write``, ``mid-metadata-write``, ``mid-base-write``,
``mid-delete``, ``mid-log-write`` (half a merge-on-read data log written) and ``decided``
(object stores: after the lease record that decides a global completion is created, before
the instant file is written; ``timeline.lease``).
"""

from __future__ import annotations

import pyarrow as pa

from lakebraid.metadata.table import MetadataTable
from lakebraid.writers.client import WriteClient

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def rows(keys: list[str], day: str, ts: int, amount: float) -> pa.Table:
    n = len(keys)
    return pa.table({"id": keys, "day": [day] * n, "ts": [ts] * n, "amount": [amount] * n})


OPERATION_CODE = {
    "insert": "c.insert(rows(['n1', 'n2'], DAYS[2], 5, 5.0))",
    "upsert": "c.upsert(rows(['a1', 'b1', 'n3'], DAYS[0], 6, 6.0))",
    "delete": "c.delete(['a2', 'b2'])",
    # 70 new partitions: past the in-process engine's BATCH_FILES (64), so one batch marker
    # names the files and one syncfs makes them durable
    "wide insert": "c.insert(__import__('pyarrow').table({'id': [f'w{i}' for i in range(70)], "
    "'day': [f'2025-{i:03d}' for i in range(70)], 'ts': [7] * 70, 'amount': [7.0] * 70}))",
    # 20 new partitions: written together by writers.write.newgroups, each file behind its
    # own marker (fewer than BATCH_FILES)
    "twenty-partition insert": "c.insert(__import__('pyarrow').table({'id': [f't{i}' for i in "
    "range(20)], 'day': [f'2025-{i:03d}' for i in range(20)], 'ts': [8] * 20, "
    "'amount': [8.0] * 20}))",
    "rollback": "c.rollback(c.timeline()[-1].time)",
    "restore": "c.restore(SAVED)",
    "delete savepoint": "c.delete_savepoint(SAVED)",
    "clean": "c.clean()",
    "compaction": "MetadataTable(c.table).compact()",
}


def run_operation(c: WriteClient, name: str, saved: str) -> None:
    exec(
        OPERATION_CODE[name],
        {"c": c, "rows": rows, "DAYS": DAYS, "SAVED": saved, "MetadataTable": MetadataTable},
    )


KILLER = """
import os, signal, sys
import pyarrow as pa
from lakebraid.metadata.table import MetadataTable
from lakebraid.timeline.store import InstantStore
import lakebraid.metadata.basefile, lakebraid.metadata.writer, lakebraid.metadata.table
import lakebraid.writers.services.clean, lakebraid.writers.services.rollback
import lakebraid.writers.write.filegroup
import lakebraid.writers.write.newgroups
import lakebraid.writers.write.creator
from lakebraid import metadata, writers
from lakebraid.writers.client import WriteClient

path, op, point, saved, actions = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
actions = set(actions.split(","))
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
if ":" in point:
    step, kind = point.split(":")
    original = getattr(InstantStore, step)
    def patched(self, k, time, action, *args, **kwargs):
        result = original(self, k, time, action, *args, **kwargs)
        if k.value == kind and action.value in actions:
            die()
        return result
    setattr(InstantStore, step, patched)
elif point == "mid-data-write":
    def torn(fs, path, *args):
        handle = fs.open(path, "wb")  # local disk: on disk once flushed; a store: never sent
        handle.write(b"PAR1 torn")
        handle.flush()
        die()
    writers.write.filegroup.write_parquet = torn
    writers.write.newgroups.write_parquet = torn  # new groups written as a batch
    def torn_local(path, data):  # a batch's small local files, created on an I/O thread
        with open(path, "wb") as out:
            out.write(b"PAR1 torn")
        die()
    writers.write.creator.write_local = torn_local
elif point == "mid-metadata-write":
    def torn_log(fs, path, blobs, **kwargs):  # sync= among them
        with open(path, "ab") as out:
            out.write(blobs[0][: len(blobs[0]) // 2])
        die()
    metadata.writer.append_blocks = torn_log
elif point == "mid-log-write":
    import lakebraid.writers.write.logappend as logappend
    original_log = logappend._write_log
    def torn_data_log(fs, layout, task, name, data, *rest):
        original_log(fs, layout, task, name, data[: len(data) // 2], *rest)
        die()
    logappend._write_log = torn_data_log
elif point == "mid-base-write":
    def torn_base(fs, path, table, **kwargs):
        with open(path + ".inprogress", "wb") as out:
            out.write(b"PAR1 torn")
        die()
    metadata.table.write_base = torn_base
    metadata.table.write_stored = lambda fs, path, *rest: torn_base(fs, path, None)
elif point == "decided":
    from lakebraid.timeline.lease import LeaseLock
    original_materialise = LeaseLock._materialise
    def decided_then_die(self):
        pending = self._last.pending if self._last is not None else None
        if pending is not None and pending.path.rsplit(".", 1)[-1] in actions:
            die()
        original_materialise(self)
    LeaseLock._materialise = decided_then_die
elif point == "mid-delete":
    for module in (writers.services.rollback, writers.services.clean):
        original_remove = module.remove
        def remove_then_die(*args, _original=original_remove):
            _original(*args)
            die()
        module.remove = remove_then_die
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
def rows(keys, day, ts, amount):
    n = len(keys)
    return pa.table({"id": keys, "day": [day] * n, "ts": [ts] * n, "amount": [amount] * n})
c = WriteClient.open(path)
exec(sys.argv[6], {"c": c, "rows": rows, "DAYS": DAYS, "SAVED": saved,
                   "MetadataTable": MetadataTable})
print("finished without being killed")
"""


def content(c: WriteClient) -> list[dict]:
    return c.read_arrow().sort_by("id").select(["id", "day", "ts", "amount"]).to_pylist()
