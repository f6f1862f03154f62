"""Current base files and file slices of the data table from a ``files`` listing, against a
model built from the names the test drew (merge-on-read logs included)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakebraid.index.file_groups import (
    DataSlice,
    current_files,
    current_slices,
    group_rows,
    small_groups,
)
from lakebraid.metadata.records import ColumnStatsRecord
from lakebraid.timeline.errors import InvalidPathError
from lakebraid.timeline.layout import data_file_name, parse_data_file_name

FIDS = [str(uuid.UUID(int=n)) for n in range(4)]
TIMES = [f"2026112608{n:07d}" for n in range(40)]

files = st.lists(
    st.tuples(
        st.sampled_from(["day=1", "day=2"]),
        st.sampled_from(FIDS),
        st.sampled_from(TIMES),
        st.sampled_from(["base", "log"]),
    ),
    unique_by=lambda f: (f[2], f[1], f[3]),
    max_size=30,
)


@given(files)
def test_current_slices_hold_the_newest_base_and_every_log_in_instant_order(drawn) -> None:
    listing: dict[str, dict[str, int]] = {}
    for partition, fid, time, kind in drawn:
        listing.setdefault(partition, {})[data_file_name(fid, "0-0", time, kind)] = 1
    slices = current_slices(listing)
    bases = current_files(listing)
    for partition, fid in {(p, f) for p, f, _, _ in drawn}:
        mine = [(t, k) for p, f, t, k in drawn if (p, f) == (partition, fid)]
        base_times = [t for t, k in mine if k == "base"]
        base = data_file_name(fid, "0-0", max(base_times)) if base_times else None
        logs = tuple(
            data_file_name(fid, "0-0", t, "log") for t in sorted(t for t, k in mine if k == "log")
        )
        assert slices[partition][fid] == DataSlice(partition, fid, base, logs)
        assert bases.get(partition, {}).get(fid) == base  # logs never count as the base
    assert sum(len(g) for g in slices.values()) == len({(p, f) for p, f, _, _ in drawn})


@given(st.sampled_from(FIDS), st.sampled_from(TIMES), st.sampled_from(["base", "log"]))
def test_data_file_names_round_trip(fid, time, kind) -> None:
    name = data_file_name(fid, "7-0", time, kind)
    assert name.endswith(".parquet" if kind == "base" else ".log")
    parsed = parse_data_file_name(name)
    assert (parsed.file_id, parsed.write_token, parsed.instant, parsed.kind) == (
        fid,
        "7-0",
        time,
        kind,
    )


@pytest.mark.parametrize(
    "name",
    [
        f"{FIDS[0]}_0-0_{TIMES[0]}.logs",
        f"{FIDS[0]}_0-0_{TIMES[0]}",
        f"{FIDS[0]}_{TIMES[0]}.log",
        f"{FIDS[0]}_0_0_{TIMES[0]}.log",
        f"ABCDEF01-0000-0000-0000-000000000000_0-0_{TIMES[0]}.log",
        f"{FIDS[0]}_0-0_2026.log",
    ],
)
def test_a_name_that_is_no_data_file_is_refused_by_name(name) -> None:
    with pytest.raises(InvalidPathError) as info:
        parse_data_file_name(name)
    assert "is not" in str(info.value)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(InvalidPathError, match="kind 'delta'"):
        data_file_name(FIDS[0], "0-0", TIMES[0], "delta")


def test_group_rows_and_small_groups_read_the_current_base_files_counts() -> None:
    """Rows come from the statistics of the groups' current base files only: an older base of
    a group and a file of no current group are left out; small groups are those under the
    limit."""
    old, new = data_file_name(FIDS[0], "0-0", TIMES[1]), data_file_name(FIDS[0], "0-0", TIMES[2])
    other, gone = data_file_name(FIDS[1], "0-0", TIMES[1]), data_file_name(FIDS[2], "0-0", TIMES[1])
    listing = {"day=1": {FIDS[0]: new}, "day=2": {FIDS[1]: other}}
    stats = [
        ColumnStatsRecord("id", "day=1", old, "a", "z", 0, 900, 1),
        ColumnStatsRecord("id", "day=1", new, "a", "z", 0, 700, 1),
        ColumnStatsRecord("id", "day=2", other, "a", "z", 0, 40, 1),
        ColumnStatsRecord("id", "day=2", gone, "a", "z", 0, 5, 1),
    ]
    assert group_rows(stats, listing) == {("day=1", FIDS[0]): 700, ("day=2", FIDS[1]): 40}
    assert small_groups(group_rows(stats, listing), 100) == {"day=2": {FIDS[1]: 40}}
    assert small_groups(group_rows(stats, listing), 701) == {
        "day=1": {FIDS[0]: 700},
        "day=2": {FIDS[1]: 40},
    }


@given(files, st.data())
def test_a_listing_with_two_bases_of_one_group_is_refused_naming_both(drawn, data) -> None:
    """One base per (partition, file id), any logs: accepted. A second base of a group that
    has one: refused, naming both files and the partition."""
    from lakebraid.index.errors import DamagedListingError
    from lakebraid.index.file_groups import check_one_base

    listing: dict[str, dict[str, int]] = {}
    bases: dict[tuple[str, str], str] = {}
    for partition, fid, time, kind in drawn:
        if kind == "base" and (partition, fid) in bases:
            continue
        name = data_file_name(fid, "0-0", time, kind)
        listing.setdefault(partition, {})[name] = 1
        if kind == "base":
            bases[(partition, fid)] = name
    check_one_base(listing, "t")
    if not bases:
        return
    (partition, fid), first = data.draw(st.sampled_from(sorted(bases.items())))
    taken = {parse_data_file_name(n).instant for n in listing[partition] if n.startswith(fid)}
    time = data.draw(st.sampled_from([t for t in TIMES if t not in taken]))
    second = data_file_name(fid, "0-0", time)
    listing[partition][second] = 1
    with pytest.raises(DamagedListingError) as caught:
        check_one_base(listing, "t")
    assert first in str(caught.value) and second in str(caught.value)
    assert repr(partition) in str(caught.value) and caught.value.table == "t"
