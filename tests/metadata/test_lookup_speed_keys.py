"""The fixed-width forms of base-file keys (``metadata.keyorder``): hex digits packed two to
a byte keep the keys' order and come back unchanged; wanted keys that do not fit the packing
cannot be in the file."""

from __future__ import annotations

import random
import uuid

import pyarrow as pa
import pytest

from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.keyorder import HexKeys, hex_keys, key_strings, stored_keys


def test_uuids_pack_to_sixteen_bytes_in_order_and_back() -> None:
    rng = random.Random(5)
    keys = sorted(str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(200))
    packed, codec = stored_keys(pa.array(keys))
    assert codec is not None and packed is not None
    assert codec.width == 16 and len(codec.positions) == 31  # version digit and hyphens fixed
    raw = [bytes(b) for b in packed.to_pylist()]
    assert raw == sorted(raw)
    assert key_strings(packed, codec, validate=False).to_pylist() == keys


def test_odd_digit_counts_and_keys_that_do_not_fit() -> None:
    keys = pa.array([f"id-{i:05d}" for i in range(0, 30000, 7)])
    packed, codec = stored_keys(keys)
    assert codec is not None and packed is not None and len(codec.positions) % 2 == 1
    assert key_strings(packed, codec, validate=False).to_pylist() == keys.to_pylist()
    wanted = pa.array(["id-00007", "id-0007", "ID-00007", "id-0000g", "xx-00014", "id-00014"])
    fit, index = codec.pack(wanted)
    assert index.tolist() == [0, 5]
    assert codec.unpack(fit).to_pylist() == ["id-00007", "id-00014"]


@pytest.mark.parametrize(
    "keys", [["g-1", "h-2"], ["key-1", "key-22"], ["only"]], ids=["non-hex", "ragged", "one"]
)
def test_keys_that_do_not_pack(keys: list[str]) -> None:
    fixed, codec = stored_keys(pa.array(keys))
    assert codec is None
    assert fixed is None or key_strings(fixed, None, validate=True).to_pylist() == keys
    assert hex_keys(pa.array([b"ab", b"ac"], pa.binary(2))) == HexKeys("ab", (1,))


@pytest.mark.parametrize(
    "positions", [(), (4,), (2, 2), (0,)], ids=["none", "out", "dup", "nonhex"]
)
def test_a_damaged_packing_is_refused(positions: tuple[int, ...]) -> None:
    with pytest.raises(MetadataValueError):
        HexKeys("x-12", positions).check()
