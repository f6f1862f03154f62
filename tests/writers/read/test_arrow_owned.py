"""Rows a read returns live in Arrow's memory pool, none in a Python object.

pyarrow releases a buffer that wraps a Python object (``pa.py_buffer``, zero-copy numpy)
under the interpreter lock. When the last reference is dropped by one of Arrow's threads (a
compute plan's task, after ``table.filter(expression)`` returned) while the interpreter
exits, that thread is stopped inside a C++ destructor and the process aborts ("terminate
called without an active exception", exit code 134) after its work is done. A table's
buffers are all the pool's exactly when dropping the table frees at least their size from
the pool; a buffer of Python memory frees nothing there.
"""

from __future__ import annotations

import gc

import fsspec
import pyarrow as pa
import pytest

from lakebraid.index.datalog import data_rows, encode_data_block, iter_blocks
from lakebraid.index.keys import RECORD_KEY
from lakebraid.timeline.layout import data_file_name
from lakebraid.writers.client import WriteClient

SCHEMA = pa.schema([("id", pa.string()), ("day", pa.string()), ("v", pa.int64())])


def freed_by_dropping(holder: list[pa.Table]) -> tuple[int, int]:
    """(bytes of the table's buffers, bytes the pool frees when the table is dropped)."""
    gc.collect()
    pool = pa.default_memory_pool()
    total = holder[0].get_total_buffer_size()
    before = pool.bytes_allocated()
    holder.clear()
    gc.collect()
    return total, before - pool.bytes_allocated()


def rows(keys: range, salt: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": [f"k{i:06d}" for i in keys],
            "day": [f"d{i % 3}" for i in keys],
            "v": [i + salt for i in keys],
        }
    )


@pytest.mark.parametrize("kind", ["copy_on_write", "merge_on_read"])
def test_a_read_holds_no_python_memory(tmp_path, kind: str) -> None:
    """Partition values and commit times are dictionary text decoded to plain text: the
    decoded buffers are the pool's, like the rest, on both table types, merged or not."""
    client = WriteClient.create(
        str(tmp_path / "t"),
        schema=SCHEMA,
        record_key="id",
        partition_by=["day"],
        table_type=kind,
    )
    client.upsert(rows(range(30_000)))
    client.upsert(rows(range(0, 30_000, 7), salt=1))
    holder = [client.read_arrow()]
    assert holder[0].num_rows == 30_000
    total, freed = freed_by_dropping(holder)
    assert total > 1_000_000 and freed >= total, (kind, total, freed)


def test_a_decoded_log_block_holds_no_python_memory(tmp_path) -> None:
    """A block's body is read from a Python ``bytes``; its rows are copied out of it."""
    keys = [f"k{i:06d}" for i in range(20_000)]
    body = pa.table({"id": keys, "v": list(range(20_000)), RECORD_KEY: keys})
    fid = "00000000-0000-0000-0000-000000000001"
    for compressed in (False, True):
        block, _ = encode_data_block(
            body, instant="20261126000000002", partition="", file_id=fid, compressed=compressed
        )
        path = tmp_path / data_file_name(fid, "0-0", "20261126000000002", "log")
        path.write_bytes(block)
        for holder in (
            [data_rows(bytes(block), str(path))],
            [next(iter_blocks(fsspec.filesystem("file"), str(path))).rows],
        ):
            assert holder[0].num_rows == 20_000
            total, freed = freed_by_dropping(holder)
            assert total > 200_000 and freed >= total, (compressed, total, freed)


def test_a_patched_column_holds_no_python_memory() -> None:
    """``inplace.replaced`` of a column it may not write (``owned=False``): the patched copy
    and the new values gathered from a log are the pool's; values equal Arrow's."""
    from lakebraid.writers.write.inplace import replaced

    for kind, old, new in (
        (pa.int64(), list(range(50_000)), [-1, -2, -3]),
        (pa.string(), [f"{i:08d}" for i in range(50_000)], ["aaaaaaaa", "bbbbbbbb", "cccccccc"]),
    ):
        column = pa.chunked_array([pa.array(old, kind)])
        rows = [3, 700, 49_999]
        holder = [
            pa.table({"c": replaced(column, pa.array(rows).to_numpy(), pa.array(new, kind), kind)})
        ]
        want = list(old)
        for at, value in zip(rows, new, strict=True):
            want[at] = value
        assert holder[0].column("c").to_pylist() == want
        total, freed = freed_by_dropping(holder)
        assert total > 200_000 and freed >= total, (kind, total, freed)
