"""A store that fails reads of healthy files (5xx, dropped connections: the loopback S3
server's proxy) is never reported as a damaged file: reads, lookups and ``validate()`` raise
``StorageReadError`` (retry), a write fails and is rolled back, and once the store answers
again everything reads and validates clean."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from lakebraid.metadata.errors import StorageReadError
from lakebraid.writers.client import WriteClient

FAST = {"config_kwargs": {"retries": {"total_max_attempts": 1}}}  # fail at once, no backoff
DATA_FILE = re.compile(r"/t/[^./][^/?]*\.parquet")  # a data file (not under .braid)
BASE_FILE = re.compile(r"/\.braid/metadata/[^?]*\.parquet")  # a metadata base file


def _table(url: str, table_type: str) -> WriteClient:
    client = WriteClient.create(
        url, record_key="k", precombine="ts", table_type=table_type, storage_options=FAST
    )
    client.upsert(pa.table({"k": ["a", "b"], "v": [1, 2], "ts": [1, 1]}))
    client.upsert(pa.table({"k": ["a"], "v": [3], "ts": [2]}))  # merge-on-read: a log
    client.compact_metadata()  # metadata base files to read
    return client


@pytest.mark.parametrize("fault", ["500", "reset"])
@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_failed_reads_of_data_files_are_storage_errors_not_corruption(
    s3_url, s3_rule, fault, table_type
):
    url = s3_url()
    _table(url, table_type)
    client = WriteClient.open(url, storage_options=FAST)
    s3_rule(lambda kind, target, _: fault if kind == "GET" and DATA_FILE.search(target) else None)
    for read in (
        client.read_arrow,
        lambda: client.read_arrow(mode="read_optimized"),
        client.validate,
    ):
        with pytest.raises(StorageReadError, match=r"failed in the storage.*retry") as caught:
            read()
        assert ".parquet" in str(caught.value) and "damaged" not in str(caught.value).split(";")[0]
    update = pa.table({"k": ["a"], "v": [9], "ts": [3]})
    if table_type == "copy_on_write":  # rewrites a's file: reads it first
        with pytest.raises(StorageReadError):
            client.upsert(update)
    else:  # appends a log block: reads no data file
        client.upsert(update)
    s3_rule(None)
    assert client.validate() == []
    rows = client.read_arrow().sort_by("k")
    assert rows["k"].to_pylist() == ["a", "b"]
    assert rows["v"].to_pylist() == [3 if table_type == "copy_on_write" else 9, 2]


def test_failed_reads_of_metadata_base_files_are_storage_errors(s3_url, s3_rule):
    url = s3_url()
    _table(url, "copy_on_write")
    client = WriteClient.open(url, storage_options=FAST)
    s3_rule(lambda kind, target, _: "500" if kind == "GET" and BASE_FILE.search(target) else None)
    for read in (client.read_arrow, lambda: client.lookup(["a"]), client.validate):
        with pytest.raises(StorageReadError, match="failed in the storage"):
            read()
    s3_rule(None)
    assert client.lookup(["a"])["a"] is not None
    assert client.validate() == []
