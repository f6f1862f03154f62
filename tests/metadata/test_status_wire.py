"""A write status crosses from a Spark task to the driver as msgpack
(``metadata.commits.encode_status``): its statistics values keep their types (plain msgpack
turned dates and naive timestamps into text, and the column statistics then held text)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st
from stat_fixtures import STAT_VALUES

from lakebraid.metadata.commits import ColumnStat, WriteStatus, decode_status, encode_status

UTC = dt.UTC


@given(st.lists(st.tuples(st.text(min_size=1), STAT_VALUES, STAT_VALUES), max_size=5))
def test_a_status_round_trips_with_typed_statistics(stats) -> None:
    status = WriteStatus(
        partition="day=1",
        file_id="f",
        file_name="n.parquet",
        old_file=None,
        stats=[ColumnStat(name, lo, hi, 0, 1, 8) for name, lo, hi in stats],
    )
    back = decode_status(encode_status(status))
    assert back == status
    for got, want in zip(back.stats, status.stats, strict=True):
        assert type(got.min_value) is type(want.min_value)
        assert type(got.max_value) is type(want.max_value)
        assert str(got.min_value) == str(want.min_value)  # a decimal keeps its scale


names = st.from_regex(r"[a-f0-9]{8}_0-0_2026120603[0-9]{7}\.(parquet|log)", fullmatch=True)


@given(
    st.one_of(st.none(), names),
    st.one_of(st.none(), names),
    st.lists(names, max_size=3),
    st.one_of(st.none(), names),
)
def test_the_files_a_status_built_on_round_trip(old_file, base, old_logs, previous) -> None:
    """Every file of an earlier commit a status relied on crosses the wire and is named by
    ``built_on`` (recovery reads it to tell a lost completion from a crash)."""
    status = WriteStatus(
        partition="",
        file_id="f",
        file_name="n.log",
        old_file=old_file,
        base_file=base,
        old_logs=old_logs,
        previous_log=previous,
    )
    back = decode_status(encode_status(status))
    assert back == status
    want = [f for f in (old_file, *old_logs, base, previous) if f is not None]
    assert sorted(back.built_on()) == sorted(want)


def test_a_status_of_an_older_writer_has_no_previous_log() -> None:
    import msgspec

    older = {"partition": "", "file_id": "f", "file_name": "n.log", "old_file": None}
    assert decode_status(msgspec.msgpack.encode(older)).previous_log is None
