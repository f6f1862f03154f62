"""Keys given to ``lookup`` and ``delete`` (``index.keys.key_texts``): each is converted to the
table's key type exactly or refused by name. Arrow's conversion of Python values truncates a
float to an integer and reads ``True`` as 1, so before this rule ``delete([2.5])`` on a table of
integer keys deleted key 2."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from lakebraid.index.errors import RecordKeyError
from lakebraid.index.keys import key_texts
from lakebraid.writers.client import WriteClient

EXACT = [
    (pa.int64(), [7, "7", "07", 7.0, -0.0], ["7", "7", "7", "7", "0"]),
    (pa.int32(), [2**31 - 1], ["2147483647"]),
    (pa.string(), ["a", 7, 2.5], ["a", "7", "2.5"]),
    (pa.decimal128(5, 2), [Decimal("1.5"), Decimal("1.50"), 2], ["1.50", "1.50", "2.00"]),
    (pa.date32(), [dt.date(2024, 1, 2), "2024-01-02"], ["2024-01-02", "2024-01-02"]),
    (
        pa.timestamp("us", "UTC"),
        [dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC), dt.datetime(2024, 1, 2, 3, 4, 5, 6)],
        ["2024-01-02 03:04:05.000006Z", "2024-01-02 03:04:05.000006Z"],
    ),
]
INEXACT = [
    (pa.int64(), [1, 2.5], "key 2.5 is not a value of the table's key type int64"),
    (pa.int64(), [1.0000000000000002], "key 1.0000000000000002 is not a value"),
    (pa.int64(), [True], "key True is not a value of the table's key type int64"),
    (pa.int8(), [300], "not all values of the table's key type int8"),
    (pa.int64(), [2**70], "numbers out of its range"),
    (pa.date32(), [dt.datetime(2024, 1, 2, 5)], r"read as datetime\.date\(2024, 1, 2\)"),
    (pa.date32(), [dt.datetime(2024, 1, 2)], "is not a value of the table's key type date32"),
    (pa.timestamp("s"), [dt.datetime(2024, 1, 2, 3, 4, 5, 6)], "is not a value"),
    (pa.string(), [1.0], "key 1.0 is not a value of the table's key type string"),
    (pa.string(), [True], "key True is not a value of the table's key type string"),
]


@pytest.mark.parametrize(("kind", "keys", "texts"), EXACT)
def test_keys_of_the_key_type_or_text_convert_to_their_canonical_text(kind, keys, texts):
    assert key_texts(keys, kind, table="t", what="lookup").to_pylist() == texts


@pytest.mark.parametrize(("kind", "keys", "message"), INEXACT)
def test_a_key_the_conversion_would_change_is_refused_by_name(kind, keys, message):
    with pytest.raises(RecordKeyError, match=message) as raised:
        key_texts(keys, kind, table="t", what="delete")
    assert raised.value.table == "t"
    assert str(raised.value).startswith("delete: ")


@pytest.mark.parametrize("table_type", ["copy_on_write", "merge_on_read"])
def test_a_fractional_or_boolean_key_deletes_and_finds_nothing(tmp_path, table_type):
    path = str(tmp_path / "t")
    client = WriteClient.create(path, "id", [], None, table_type=table_type)
    client.bulk_insert(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": [1, 2, 3]}))
    timeline = client.timeline()
    for keys in ([2.5], [True], [1, 1.5]):
        with pytest.raises(RecordKeyError, match="is not a value of the table's key type"):
            WriteClient.open(path).delete(keys)
        with pytest.raises(RecordKeyError, match="is not a value of the table's key type"):
            WriteClient.open(path).lookup(keys)
    after = WriteClient.open(path)
    assert after.timeline() == timeline
    assert sorted(r["id"] for r in after.read_arrow().to_pylist()) == [1, 2, 3]
    assert after.lookup([2.0])["2"] is not None  # an integral float is that integer
