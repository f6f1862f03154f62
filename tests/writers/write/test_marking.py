"""Markers (``writers.write.marking``): batch markers round-trip, a batch marker cut short by a
crash names only whole paths it was given, a damaged one is an error naming it; and a wide
write (one batch marker, one syncfs) that fails part way leaves no file behind."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakebraid.writers.engine.rewrites as rewrites
from lakebraid.timeline.layout import TableLayout
from lakebraid.writers.client import WriteClient
from lakebraid.writers.errors import WriteError
from lakebraid.writers.settings import SYNC_BATCH_FILES
from lakebraid.writers.write.marking import BATCH_HEADER, mark, mark_all, marked, read_batch

FS = fsspec.filesystem("file")
SYNC = SYNC_BATCH_FILES.name
# a batch marker holds any one-line text; a file marker's path must be a real file name
TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r/"), min_size=1
)
NAME = st.text("abcé=%-_.0123456789", min_size=1, max_size=12).filter(lambda s: s.strip("."))
PATHS = st.lists(st.lists(TEXT, min_size=1, max_size=3).map("/".join), max_size=20)
FILES = st.lists(st.lists(NAME, min_size=1, max_size=3).map("/".join), max_size=10)


def _markers(tmp: Path, instant: str = "20240101000000000") -> tuple[TableLayout, str]:
    layout = TableLayout(str(tmp))
    return layout, layout.markers_dir(instant)


@settings(max_examples=60, deadline=None)
@given(paths=PATHS, singles=FILES)
def test_batch_and_file_markers_name_exactly_the_files_given(tmp_path_factory, paths, singles):
    layout, folder = _markers(tmp_path_factory.mktemp("m"))
    mark_all(FS, layout, "20240101000000000", paths)
    for path in singles:
        partition, _, name = path.rpartition("/")
        mark(FS, layout, "20240101000000000", partition, name)
    assert marked(FS, folder, FS.find(folder)) == set(paths) | set(singles)


@settings(max_examples=40, deadline=None)
@given(paths=PATHS.filter(bool), data=st.data())
def test_a_batch_marker_cut_short_names_only_whole_given_paths(tmp_path_factory, paths, data):
    layout, _ = _markers(tmp_path_factory.mktemp("m"))
    target = mark_all(FS, layout, "20240101000000000", paths)
    whole = Path(target).read_bytes()
    cut = data.draw(st.integers(0, len(whole)), label="cut")
    Path(target).write_bytes(whole[:cut])
    found = read_batch(FS, target)
    assert set(found) <= set(paths)
    if cut == len(whole):
        assert found == paths


def test_a_damaged_batch_marker_is_an_error_naming_it(tmp_path):
    layout, folder = _markers(tmp_path)
    target = mark_all(FS, layout, "20240101000000000", ["day=1/a.parquet"])
    Path(target).write_bytes(b"garbage\nday=1/a.parquet\n")
    with pytest.raises(WriteError, match=r"batch marker .* is damaged"):
        marked(FS, folder, FS.find(folder))
    assert read_batch(FS, f"{folder}/gone.markers") == []
    Path(target).write_bytes(BATCH_HEADER.encode()[:5])  # cut inside the header: nothing named
    assert marked(FS, folder, FS.find(folder)) == set()
    Path(target).write_bytes(f"{BATCH_HEADER}\nday=1/\xff.parquet\nday=2/b\n".encode("latin-1"))
    with pytest.raises(WriteError, match="not UTF-8"):
        marked(FS, folder, FS.find(folder))
    Path(target).write_bytes(f"{BATCH_HEADER}\nday=1/a\nday=2/é".encode()[:-1])  # cut in a char
    assert marked(FS, folder, FS.find(folder)) == {"day=1/a"}


@pytest.mark.parametrize("bad", ["a\nb.parquet", "", "/"])
def test_a_path_that_is_not_one_line_is_refused(tmp_path, bad):
    layout, _ = _markers(tmp_path)
    with pytest.raises(WriteError, match="one non-empty line"):
        mark_all(FS, layout, "20240101000000000", ["ok.parquet", bad])


def wide(n: int, ts: int) -> pa.Table:
    return pa.table(
        {
            "id": [f"k{i}" for i in range(n)],
            "day": [f"d{i:03d}" for i in range(n)],
            "ts": [ts] * n,
        }
    )


def test_a_wide_write_that_fails_part_way_leaves_nothing(tmp_path, fail_parquet_write):
    """A write of more than write.sync.batch.files new file groups whose 20th file fails: the
    write rolls itself back from its batch marker; no data file, marker or row of it is left, and
    the next wide write commits every file durable and sweeps its markers."""
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    n = SYNC_BATCH_FILES.default + 6
    calls = fail_parquet_write(20)
    with pytest.raises(OSError, match="injected"):
        c.insert(wide(n, 1))
    table = Path(c.path)
    assert len(calls) >= 20
    assert not list(table.glob("day=*/*.parquet")), "a file of the failed write was left"
    assert not list((table / ".braid" / "markers").glob("*/*"))
    assert c.read_arrow().num_rows == 0 and c.validate() == []
    c.insert(wide(n, 2))
    assert len(list(table.glob("day=*/*.parquet"))) == n
    assert not list((table / ".braid" / "markers").glob("*/*"))
    assert sorted(c.read_arrow().column("id").to_pylist()) == sorted(f"k{i}" for i in range(n))
    assert c.validate() == []


def test_the_batch_threshold_is_a_table_option(tmp_path, monkeypatch):
    """write.sync.batch.files: from that many files one batch marker (and one syncfs); 0
    never batches. Every write's rows are there either way."""
    batches: list[int] = []
    real = rewrites.mark_all

    def spy(fs, layout, instant, paths):
        paths = list(paths)
        batches.append(len(paths))
        return real(fs, layout, instant, paths)

    monkeypatch.setattr(rewrites, "mark_all", spy)
    never = WriteClient.create(str(tmp_path / "a"), "id", ["day"], "ts", **{SYNC: 0})
    never.insert(wide(SYNC_BATCH_FILES.default + 6, 1))
    assert batches == []
    low = WriteClient.create(str(tmp_path / "b"), "id", ["day"], "ts", **{SYNC: 10})
    low.insert(wide(12, 1))
    low.upsert(wide(9, 2))  # 9 groups: under the threshold
    assert batches == [12]
    assert low.read_arrow().num_rows == 12 and low.validate() == []
    with pytest.raises(Exception, match=r"write\.sync\.batch\.files"):
        WriteClient.create(str(tmp_path / "c"), "id", ["day"], "ts", **{SYNC: -1})
