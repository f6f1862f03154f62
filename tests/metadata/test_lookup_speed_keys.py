"""The fixed-width forms of base-file keys (``metadata.hexkeys``): hex digits packed two to
a byte keep the keys' order and come back unchanged; wanted keys that do not fit the packing
cannot be in the file."""

from __future__ import annotations

import random
import uuid

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.hexkeys import HexKeys, hex_keys, key_strings, stored_keys


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


def _reference_pack(codec: HexKeys, key: str) -> bytes | None:
    """What packing one key means, written out per key: the template's bytes elsewhere,
    lowercase hex digits at the positions, two to a byte (a zero nibble after an odd last)."""
    raw, template = key.encode(), codec.template.encode()
    if len(raw) != len(template):
        return None
    places = set(codec.positions)
    if any(raw[i] != template[i] for i in range(len(raw)) if i not in places):
        return None
    digits = "".join(chr(raw[i]) for i in codec.positions)
    if any(d not in "0123456789abcdef" for d in digits):
        return None
    return bytes.fromhex(digits + "0" * (len(digits) % 2))


HEXISH = st.sampled_from("0123456789abcdef" * 3 + "Ag-x")


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(0, 2**32 - 1))
def test_packing_matches_a_per_key_reference(data: st.DataObject, seed: int) -> None:
    """stored_keys, pack and unpack agree key by key with :func:`_reference_pack`, whatever
    the keys (fitting or not, one width or ragged), and packing keeps the keys' order."""
    template = data.draw(st.text(HEXISH, min_size=1, max_size=9))
    places = data.draw(st.sets(st.integers(0, len(template) - 1), min_size=1))
    digits = st.lists(
        st.sampled_from("0123456789abcdef"), min_size=len(places), max_size=len(places)
    )

    def fill(chosen: list[str]) -> str:
        key = list(template)
        for at, digit in zip(sorted(places), chosen, strict=True):
            key[at] = digit
        return "".join(key)

    keys = [fill(d) for d in data.draw(st.lists(digits, min_size=1, max_size=60))]
    keys += data.draw(st.lists(st.text(HEXISH, min_size=1, max_size=9), max_size=2))  # misfits
    keys = sorted(set(keys))
    packed, codec = stored_keys(pa.array(keys))
    if codec is None:
        assert packed is None or key_strings(packed, None, validate=True).to_pylist() == keys
        return
    assert packed is not None
    want = [_reference_pack(codec, k) for k in keys]
    assert [bytes(b) for b in packed.to_pylist()] == want  # every stored key fits
    assert want == sorted(want)  # type: ignore[type-var]
    assert codec.unpack(packed).to_pylist() == keys
    probes = random.Random(seed).choices([*keys, "zz", keys[0].upper(), keys[-1] + "0"], k=20)
    fit, index = codec.pack(pa.array(probes))
    expected = [(i, p) for i, p in enumerate(_reference_pack(codec, k) for k in probes) if p]
    assert index.tolist() == [i for i, _ in expected]
    assert [bytes(b) for b in fit.to_pylist()] == [p for _, p in expected]
