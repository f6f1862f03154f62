"""``metadata.reader.fold_logs`` merges a partition's log blocks by that partition's rule, and
refuses a block of another partition (naming its file and offset) instead of merging records
of the wrong kind."""

from __future__ import annotations

import pytest

from lakebraid.metadata.errors import MetadataValueError
from lakebraid.metadata.logblock import BlockType, iter_blocks
from lakebraid.metadata.logwrite import encode_block
from lakebraid.metadata.reader import fold_logs
from lakebraid.metadata.records import FilesRecord, Partition, RecordIndexRecord

INSTANT = "20240101000000000"


def block(partition: Partition, records: list) -> bytes:
    common = {"instant": INSTANT, "partition": partition, "file_group": "g-0000"}
    return encode_block(BlockType.DATA, records=records, **common)


def test_files_records_merge_cumulatively() -> None:
    data = block(Partition.FILES, [FilesRecord("p", {"a": 1, "b": 2}, [])]) + block(
        Partition.FILES, [FilesRecord("p", {"c": 3}, ["a"])]
    )
    state = fold_logs(Partition.FILES, iter_blocks(data, "x.log"))
    assert state == {"p": FilesRecord("p", {"b": 2, "c": 3}, ["a"])}


def test_a_block_of_another_partition_is_refused() -> None:
    good = block(Partition.FILES, [FilesRecord("p", {"a": 1}, [])])
    foreign = block(Partition.RECORD_INDEX, [RecordIndexRecord("p", "x", 1, 2, 3)])
    with pytest.raises(MetadataValueError, match=f"x.log at offset {len(good)}: a record_index"):
        fold_logs(Partition.FILES, iter_blocks(good + foreign, "x.log"))
