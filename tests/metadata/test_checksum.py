"""metadata.checksum.crc32 gives zlib's CRC-32, the value every on-disk format names."""

from __future__ import annotations

import zlib

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from lakebraid.metadata.checksum import crc32


@given(st.binary(max_size=5000), st.integers(min_value=0, max_value=2**32 - 1))
def test_crc32_is_zlibs_from_any_start_value(data: bytes, start: int) -> None:
    assert crc32(data, start) == zlib.crc32(data, start)
    assert crc32(data) == zlib.crc32(data)


@given(st.binary(min_size=1, max_size=3000), st.integers(min_value=0, max_value=2999))
def test_crc32_in_pieces_is_crc32_of_the_whole(data: bytes, cut: int) -> None:
    cut = min(cut, len(data))
    assert crc32(data[cut:], crc32(data[:cut])) == zlib.crc32(data)


def test_crc32_takes_views_and_arrow_buffers_of_large_data() -> None:
    data = bytes(range(256)) * 40_000  # 10 MB: the vectorised path
    assert crc32(memoryview(data)[7:]) == zlib.crc32(data[7:])
    assert crc32(pa.py_buffer(data)) == zlib.crc32(data)
    assert crc32(b"") == 0
