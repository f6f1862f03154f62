"""Issue 11, case 6: one damaged byte is never read as data.

Every byte of a small data file, and of a small record-index base file, is flipped in turn
(and restored after each read): every read either returns exactly the rows (or locations) of
the intact table, or raises a lakebraid error whose message names the damaged file. Before the
fix, 38 of 55 flipped offsets in a data file changed values without an error and 2 of 13 in a
base file made existing keys absent. ``validate()`` reports every damaged data file (its
CRC-32 no longer matches the one its commit recorded) and lists every problem.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakebraid.metadata import basefile
from lakebraid.metadata.errors import CorruptBaseFileError
from lakebraid.timeline.errors import LakebraidError
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import CorruptDataFileError
from lakebraid.writers.services.validate import rebuild

KEYS = ["a", "b", "c", "d", "e", "zz"]  # "zz" is absent
MASKS = (0xFF, 0x01)  # every bit of the byte; its lowest bit only


def build(root: Path, spark: object = None) -> WriteClient:
    c = WriteClient.create(
        str(root), record_key="id", partition_by=["p"], precombine="ts", spark=spark
    )
    c.upsert(
        pa.table(
            {
                "id": ["a", "b", "c"],
                "p": ["x", "x", "x"],
                "ts": [1, 2, 3],
                "v": [1.5, 2.5, None],
                "s": ["q", "r", "s"],
            }
        )
    )
    c.upsert(pa.table({"id": ["b", "d"], "p": ["x", "x"], "ts": [5, 6], "v": [9.0, 4.0]}))
    c.upsert(pa.table({"id": ["e"], "p": ["y"], "ts": [7], "v": [0.5], "s": ["t"]}))
    return c


def rows(c: WriteClient) -> list[dict]:
    basefile.FOOTERS.clear()  # parsed footers are cached by path: read the damaged one
    return c.read_arrow().sort_by("id").to_pylist()


def locations(c: WriteClient) -> dict:
    basefile.FOOTERS.clear()
    return c.lookup(KEYS)


@contextmanager
def flipped(victim: Path, offset: int, mask: int) -> Iterator[None]:
    good = victim.read_bytes()
    damaged = bytearray(good)
    damaged[offset] ^= mask
    victim.write_bytes(bytes(damaged))
    try:
        yield
    finally:
        victim.write_bytes(good)
        basefile.FOOTERS.clear()


def outcome(victim: Path, read: Callable[[], object], want: object) -> str:
    """ "right", "raised" (a lakebraid error naming the file), or what went wrong."""
    try:
        got = read()
    except LakebraidError as exc:
        return "raised" if str(victim) in str(exc) else f"raised without the file: {exc}"
    except Exception as exc:  # a raw error is a finding, reported below
        return f"raw {type(exc).__name__}: {exc}"
    return "right" if got == want else f"wrong answer: {got}"


def flip_every_byte(victim: Path, read: Callable[[], object]) -> Counter[str]:
    """Flip each byte of ``victim`` with each mask; ``read`` must give what it gives now or
    raise a lakebraid error naming the file."""
    want = read()
    size = victim.stat().st_size
    counts: Counter[str] = Counter()
    failures = []
    for mask in MASKS:
        for offset in range(size):
            with flipped(victim, offset, mask):
                found = outcome(victim, read, want)
            counts[found if found in ("right", "raised") else "failed"] += 1
            if found not in ("right", "raised"):
                failures.append(f"offset {offset} mask {mask:#04x}: {found}"[:300])
    assert read() == want  # restored
    assert not failures, f"{len(failures)} bad reads:\n" + "\n".join(failures[:20])
    print(f"{victim.name}: {size} bytes x {len(MASKS)} masks: {dict(counts)}")
    return counts


def data_file(c: WriteClient, partition: str) -> Path:
    ((name,),) = [list(files) for p, files in c.files().items() if p == partition]
    return Path(c.table.layout.data_file(partition, name))


def test_every_flipped_byte_of_a_data_file_is_right_rows_or_an_error_naming_it(tmp_path):
    c = build(tmp_path / "t")
    victim = data_file(c, "p=x")
    counts = flip_every_byte(victim, lambda: (rows(c), locations(c)))
    assert counts["raised"] > counts["right"] > 0  # most bytes matter; some (stats) do not


def test_every_flipped_byte_of_a_record_index_base_file_is_right_or_an_error(tmp_path):
    c = build(tmp_path / "t")
    assert c.compact_metadata() is not None
    # the compaction's base: the newest (the first write's commit base is older, and folded)
    victim = max(Path(c.path, ".braid/metadata/record_index").glob("*.parquet"))
    counts = flip_every_byte(victim, lambda: locations(c))  # read_arrow never opens it
    assert counts["raised"] > counts["right"] > 0


def test_validate_reports_every_damaged_data_file_and_goes_on(tmp_path):
    c = build(tmp_path / "t")
    assert c.validate() == []
    x, y = data_file(c, "p=x"), data_file(c, "p=y")
    size = x.stat().st_size
    # header, every page region and the footer, at a fixed stride
    for offset in range(0, size, 37):
        with flipped(x, offset, 0xFF):
            problems = c.validate()
        assert problems and all(x.name in p for p in problems), (offset, problems)
        assert any("checksum" in p for p in problems), (offset, problems)
    # two damaged files, one unreadable: both reported, nothing else stops the validator
    with flipped(x, size - 9, 0xFF), flipped(y, 100, 0xFF):
        problems = c.validate()
    assert any(x.name in p and "corrupt data file" in p for p in problems), problems
    assert any(y.name in p and "checksum" in p for p in problems), problems
    assert c.validate() == []


def test_validate_reports_a_footer_column_path_that_is_not_text(tmp_path):
    """The footer's column paths are not checksummed: one made invalid UTF-8 is a problem
    of that file in the report, not an exception out of ``validate()``."""
    c = build(tmp_path / "t")
    x = data_file(c, "p=x")
    data = x.read_bytes()
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    at = data.rindex(b"_braid_commit_time", footer)  # the last column chunk's path
    with flipped(x, at + 1, 0x80):  # b"b" ^ 0x80: not a UTF-8 start byte
        problems = c.validate()
    assert any(x.name in p and "corrupt data file" in p for p in problems), problems
    assert c.validate() == []


def test_errors_name_the_file_and_say_what_to_do(tmp_path):
    c = build(tmp_path / "t")
    c.compact_metadata()
    victim = data_file(c, "p=x")
    with flipped(victim, victim.stat().st_size - 9, 0xFF), pytest.raises(CorruptDataFileError) as e:
        c.read_arrow()
    assert e.value.path == str(victim) and "roll back the commit" in str(e.value)
    base = max(Path(c.path, ".braid/metadata/record_index").glob("*.parquet"))  # newest
    with flipped(base, base.stat().st_size - 9, 0xFF), pytest.raises(CorruptBaseFileError) as b:
        c.lookup(["a"])
    assert b.value.path == str(base) and "savepoint" in str(b.value)


def silent_offset(path: Path) -> int:
    """An offset inside a page whose flip a reader without page checksums reads as other
    values, without an error."""
    meta = pq.ParquetFile(path).metadata
    want = pq.read_table(path)
    group = meta.row_group(0)
    for i in range(group.num_columns):
        chunk = group.column(i)
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        for offset in range(start, start + chunk.total_compressed_size):
            with flipped(path, offset, 0xFF):
                try:
                    got = pq.read_table(path, page_checksum_verification=False)
                except (pa.ArrowException, OSError):
                    continue
            if not got.equals(want):
                return offset
    raise AssertionError(f"no flip of {path} is silent without page checksums")


def test_data_files_record_a_checksum_and_carry_page_checksums(tmp_path):
    c = build(tmp_path / "t")
    listing, checksums = rebuild(c.table)
    assert {(p, n) for p, files in listing.items() for n in files} <= set(checksums)
    assert all(isinstance(crc, int) for crc in checksums.values())
    victim = data_file(c, "p=x")
    offset = silent_offset(victim)
    with flipped(victim, offset, 0xFF):
        with pytest.raises(OSError, match="CRC"):
            pq.read_table(victim, page_checksum_verification=True)
        with pytest.raises(CorruptDataFileError, match="CRC"):
            c.read_arrow()


@pytest.mark.spark
def test_spark_reads_verify_page_checksums_and_name_the_file(tmp_path, spark):
    c = build(tmp_path / "t", spark=spark)
    victim = data_file(c, "p=x")
    want = rows(c)

    def spark_rows() -> list[dict]:
        rows = [r.asDict() for r in c.read().collect()]
        return sorted(rows, key=lambda r: r["id"])

    assert spark_rows() == want
    page = silent_offset(victim)
    url = c.table.fs.unstrip_protocol(str(victim))
    for offset in (0, page, victim.stat().st_size - 20):  # header, a page, the footer
        with flipped(victim, offset, 0xFF):
            try:
                got = spark_rows()
            except Exception as exc:  # Spark's own error types
                assert victim.name in str(exc), (offset, str(exc)[:500])
            else:
                assert got == want, offset
    unchecked = spark.read.option("parquet.page.verify-checksum.enabled", "false")
    intact = unchecked.parquet(url).toArrow()
    with flipped(victim, page, 0xFF):
        with pytest.raises(Exception, match=r"CRC|checksum") as err:
            spark_rows()
        assert victim.name in str(err.value)
        # the check is what catches it: without it Spark reads the damaged page as values
        damaged = unchecked.parquet(url).toArrow()
    assert damaged.num_rows == intact.num_rows == 4 and not damaged.equals(intact)
