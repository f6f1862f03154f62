"""A hostile user's arguments to the write client: bad table paths, service arguments of the
wrong kind, a table inside another one, lakebraid's own column names. Each is refused by name,
and nothing already committed changes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from table_fixtures import snapshot

from lakebraid.timeline.errors import ConfigError, LakebraidError
from lakebraid.writers.client import WriteClient


@pytest.fixture
def client(tmp_path) -> WriteClient:
    """A table of two commits (in-process: no Spark session)."""
    created = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    for day in ("d1", "d2"):
        created.upsert(pa.table({"id": [f"k-{day}"], "day": [day], "ts": [1]}))
    return created


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "a table path must be a non-empty string, not ''"),
        (None, "a table path must be a non-empty string, not None"),
        ("zzz://bucket/t", "cannot open zzz://bucket/t: Protocol not known: zzz"),
    ],
)
def test_a_bad_table_path_is_refused_by_name(tmp_path, path, message) -> None:
    for call in (lambda: WriteClient.open(path), lambda: WriteClient.create(path, "id", [], None)):
        with pytest.raises(ConfigError, match=message):
            call()


def test_a_file_where_the_table_would_be_is_named(tmp_path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("not a table")
    with pytest.raises(ConfigError, match=f"no lakebraid table at {blocker}"):
        WriteClient.open(str(blocker))
    with pytest.raises(ConfigError, match=f"cannot create a table at {blocker}: a file is in"):
        WriteClient.create(str(blocker), "id", [], None)
    assert blocker.read_text() == "not a table"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.rollback(None), "rollback: None is not an instant time; give the 17-digit"),
        (lambda c: c.rollback(5), "rollback: 5 is not an instant time"),
        (lambda c: c.savepoint("abc"), "savepoint: 'abc' is not an instant time"),
        (lambda c: c.restore("20261302000000000"), "restore: '20261302000000000' is not an"),
        (lambda c: c.archive(keep="a"), "archive: keep must be a whole number of at least 1"),
        (lambda c: c.archive(keep=0), "archive: keep must be a whole number of at least 1"),
        (lambda c: c.compact(min_log_files="x"), "compact: min_log_files must be a whole"),
        (
            lambda c: c.compact(min_log_files=-1),
            "compact: min_log_files must be a whole number of at least 1, not -1",
        ),
        (
            lambda c: c.compact(min_log_files=0),
            "compact: min_log_files must be a whole number of at least 1, not 0",
        ),
        (lambda c: c.timeline("bogus"), "no timeline 'bogus': one of data, metadata, global"),
    ],
)
def test_a_service_argument_of_the_wrong_kind_is_refused_by_name(client, call, message) -> None:
    before = snapshot(client)
    with pytest.raises(LakebraidError, match=message) as raised:
        call(client)
    assert raised.value.table == client.path
    assert snapshot(client) == before


@pytest.mark.parametrize(
    "names",
    [("_braid_record_key", None, []), ("id", "_braid_commit_time", []), ("id", None, ["_braid_p"])],
)
def test_lakebraid_column_names_cannot_be_key_precombine_or_partition(tmp_path, names) -> None:
    key, precombine, partitions = names
    with pytest.raises(ConfigError, match="column names starting with _braid_ are lakebraid's"):
        WriteClient.create(str(tmp_path / "t"), key, partitions, precombine)
    assert not (tmp_path / "t" / ".braid" / "table.json").exists()


@pytest.mark.parametrize("inside", ["day=2026-01-01", ".braid/x", "day=2026-01-01/deeper/t"])
def test_a_table_inside_another_table_is_refused(tmp_path, inside) -> None:
    outer = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    outer.upsert(pa.table({"id": ["a"], "day": ["2026-01-01"], "ts": [1]}))
    before = snapshot(outer)
    with pytest.raises(ConfigError, match=f"cannot create a table at {outer.path}/{inside}: it is"):
        WriteClient.create(f"{outer.path}/{inside}", "id", [], None)
    assert snapshot(outer) == before
    assert outer.validate() == []


@pytest.mark.parametrize(
    ("partition", "message"),
    [
        ("nope", "'nope' is not a partition path of this table: its partition paths read day="),
        ("dy=d1", "'dy=d1' is not a partition path"),
        ("", "'' is not a partition path"),
        ("day=d1/x=1", "'day=d1/x=1' is not a partition path"),
        ("day=d%31", "partition path 'day=d%31' is written 'day=d1' in this table; pass that"),
        (5, "partition must be a partition path such as day=<value>, got 5"),
    ],
)
def test_a_listing_of_a_malformed_partition_is_refused(client, partition, message) -> None:
    with pytest.raises(LakebraidError, match=message):
        client.files(partition)
    assert list(client.files("day=d1")) == ["day=d1"]
    assert client.files("day=never") == {}  # a well-formed partition without files


def test_statistics_of_an_unknown_column_are_refused(client) -> None:
    with pytest.raises(LakebraidError, match=r"no column 'nope' \(columns: id, day, ts\)"):
        client.column_stats("nope")
    assert len(client.column_stats("ts")) == 2


def test_a_table_in_a_missing_bucket_is_refused_and_no_bucket_is_made(s3_url) -> None:
    url = s3_url()
    missing = "s3://no-such-bucket-0b3e/t"
    with pytest.raises(ConfigError, match=r"bucket 'no-such-bucket-0b3e' of table .* does not"):
        WriteClient.create(missing, "id", [], None)
    with pytest.raises(ConfigError):
        WriteClient.open(missing)
    bucket = url.split("/")[2]
    created = WriteClient.create(url, "id", [], None)  # an existing bucket: fine
    assert created.table.fs.exists(bucket) and not created.table.fs.exists("no-such-bucket-0b3e")


def test_an_object_store_url_with_an_empty_segment_is_refused(s3_url) -> None:
    bucket = s3_url().split("/")[2]
    for url in (f"s3://{bucket}//t", f"s3://{bucket}/a//t"):
        with pytest.raises(ConfigError, match="has an empty path segment"):
            WriteClient.create(url, "id", [], None)
    WriteClient.create(f"s3://{bucket}/t/", "id", [], None)  # a trailing slash is fine


def test_a_frame_arrow_cannot_convert_is_refused_by_name(client) -> None:
    import pandas as pd

    before = snapshot(client)
    frame = pd.DataFrame({"id": ["k-x", "k-y"], "day": ["d1", "d1"], "ts": [1, "two"]})
    with pytest.raises(LakebraidError, match=r"cannot convert the DataFrame to Arrow: .* cast or"):
        client.upsert(frame)
    assert snapshot(client) == before


@pytest.mark.parametrize("table", ["/some/table", None, 3])
def test_a_client_built_from_a_path_says_how_to_open_one(table) -> None:
    with pytest.raises(
        LakebraidError, match=r"WriteClient takes an opened table, not .*open\(path\)"
    ):
        WriteClient(table)
