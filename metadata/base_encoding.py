"""How metadata base files (``metadata.basefile``) encode their columns; any Parquet reader
reads every choice, so the choice is not part of the format's version.

Encodings (any Parquet reader reads them): a fixed-width ``key`` BYTE_STREAM_SPLIT and zstd
level 1, or PLAIN and uncompressed when its bytes look random (UUIDs, hashes: a zlib pass over
a sample saves under a tenth); a string ``key`` PLAIN and zstd; other columns dictionary
encoded, zstd but for the record-index locations (:data:`UNCOMPRESSED`). On 1M random UUID4
keys (16,384-row groups, pyarrow 26), bytes per entry and key decode time: packed 13.9 and 16
ms, split text 13.6 and 45 ms, PLAIN strings 18.3 and 67 ms; packed and split + zstd versus
packed PLAIN uncompressed on a 10M-key index: 16.87 vs 19.02 bytes per entry for a cold lookup
of 110k keys in 0.56 vs 0.35-0.46 s (``benchmarks/record_index.py``). Lookups of many keys
decode every key, so packed and uncompressed wins.

A small base (under :data:`SMALL_ROWS` rows: the ``files`` and ``column_stats`` of most tables)
takes lz4 where a large one takes zstd: a zstd column chunk costs some 40 us to set up before
it decodes a byte, which is most of a small file's read (a 384-row ``column_stats`` base of 9
columns, pyarrow 26: 0.67 ms with zstd, 0.33 ms with lz4, 23% more bytes).
"""

from __future__ import annotations

import zlib

import pyarrow as pa

KEY = "key"
KEY_ENCODING = "PLAIN"  # string keys
FIXED_KEY_ENCODING = "BYTE_STREAM_SPLIT"  # keys of one width that compress
ZSTD_LEVEL = 1
SMALL_ROWS = 4096  # bases of fewer rows take lz4 instead of zstd (see the module doc)
KEY_SAMPLE = 4096  # fixed-width keys sampled to choose their encoding (``incompressible``)
# record-index locations: dictionary indices of few values, which zstd does not shrink
# (measured: 2.55 bytes per entry either way) but decompresses at some 25 us a page
UNCOMPRESSED = {
    "record_index": frozenset({"partition", "file_id_hi", "file_id_lo", "instant", "location"})
}


def encoding_options(
    partition: str, columns: list[str], fixed: pa.Array | None, rows: int
) -> dict[str, dict[str, object]]:
    """``pyarrow.parquet.write_table`` options of a base file of ``rows`` rows of
    ``partition`` whose key column is ``fixed`` (fixed-width keys) or strings (None)."""
    plain = incompressible(fixed)
    return {
        "use_dictionary": [c for c in columns if c != KEY],  # type: ignore[dict-item]
        "column_encoding": {KEY: _key_encoding(fixed, plain)},
        **_compression(partition, columns, plain, small=rows < SMALL_ROWS),
    }


def incompressible(fixed: pa.Array | None) -> bool:
    """Whether fixed-width keys look random (UUIDs, hashes): a zlib pass over a sample of
    their bytes saves under a tenth. Such keys are stored PLAIN and uncompressed: zstd would
    save some 2 bytes an entry (the leading bytes of sorted keys) for twice the decode time."""
    if fixed is None or len(fixed) == 0:
        return False
    sample = fixed.slice(0, KEY_SAMPLE)
    raw = sample.buffers()[1].to_pybytes()[: len(sample) * sample.type.byte_width]
    return len(zlib.compress(raw, 1)) > 0.9 * len(raw)


def _key_encoding(fixed: pa.Array | None, plain: bool) -> str:
    if fixed is None:
        return KEY_ENCODING
    return "PLAIN" if plain else FIXED_KEY_ENCODING


def _compression(
    partition: str, columns: list[str], plain_key: bool, small: bool
) -> dict[str, dict[str, object]]:
    raw = UNCOMPRESSED.get(partition, frozenset()) | ({KEY} if plain_key else set())
    packed = [c for c in columns if c not in raw]
    if small:
        return {"compression": {c: "lz4" if c in packed else "none" for c in columns}}
    codecs = {c: "zstd" if c in packed else "none" for c in columns}
    return {"compression": codecs, "compression_level": dict.fromkeys(packed, ZSTD_LEVEL)}
