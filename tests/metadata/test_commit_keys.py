"""Record keys packed into write statuses (``metadata.commits.pack_keys``): the bytes are the
Arrow IPC stream pyarrow's own stream writer makes, and they read back as the keys."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.commits import pack_keys, unpack_keys


def _stream(keys: pa.Array) -> bytes:
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([keys.cast(pa.string())], names=["key"])
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), max_size=40), st.integers(0, 5), st.booleans())
def test_packed_keys_are_the_stream_a_writer_makes_and_read_back(keys, skip, large) -> None:
    kind = pa.large_string() if large else pa.string()
    array = pa.array(["pad"] * skip + keys, kind).slice(skip)  # a slice, as tasks pass them
    packed = pack_keys(array)
    assert packed == (_stream(array) if keys else b"")
    assert unpack_keys(packed).to_pylist() == keys


def test_a_stream_of_other_parts_is_read_whole() -> None:
    sink = pa.BufferOutputStream()
    schema = pa.schema([pa.field("key", pa.string())], metadata={b"writer": b"another"})
    with pa.ipc.new_stream(sink, schema) as writer:  # another schema message, two batches
        writer.write_batch(pa.record_batch([pa.array(["a", "b"])], schema=schema))
        writer.write_batch(pa.record_batch([pa.array(["c"])], schema=schema))
    assert unpack_keys(sink.getvalue().to_pybytes()).to_pylist() == ["a", "b", "c"]
