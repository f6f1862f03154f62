"""Decoded metadata log files, cached per process (:data:`LOGS`), and a record-index log file
as columns (:func:`index_log_table`): one row per key, sorted by key, newest entry winning,
tombstones kept. A visible log file never changes, so (path, size) names its content."""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from lakebraid.metadata.arrow_records import INDEX_LOG_SCHEMA, KEY, first_per_key
from lakebraid.metadata.keymatch import SortedRun
from lakebraid.metadata.keyorder import fixed_view
from lakebraid.metadata.logblock import BlockType, LogBlock, read_log_file

_INDEX_FIELDS = tuple(INDEX_LOG_SCHEMA.names)
T = TypeVar("T")


class _LogCache:
    """Decoded log files, keyed by (path, size): a visible log file never changes."""

    def __init__(self, capacity: int = 256):
        self._items: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def blocks(self, fs: AbstractFileSystem, path: str, size: int | None = None) -> list[LogBlock]:
        """The blocks of a log file; ``size`` from a listing saves asking the store."""
        return self._get(fs, path, size, "", lambda s: read_log_file(fs, path))

    def index_table(self, fs: AbstractFileSystem, path: str, size: int | None = None) -> pa.Table:
        """A record-index log file as columns (:func:`index_log_table`), cached."""
        return self._get(
            fs, path, size, "#columns", lambda s: index_log_table(self.blocks(fs, path, s))
        )

    def index_run(
        self, fs: AbstractFileSystem, path: str, size: int | None = None
    ) -> SortedRun | None:
        """The keys of a record-index log file's columns as a :class:`SortedRun` (None: not
        of one width), cached: each lookup matches its wanted keys against it."""

        def run(size: int) -> SortedRun | None:
            keys = self.index_table(fs, path, size).column(KEY)
            view = fixed_view(keys.chunk(0) if keys.num_chunks == 1 else keys.combine_chunks())
            return None if view is None else SortedRun.of(view)

        return self._get(fs, path, size, "#run", run)

    def index_bounds(
        self, fs: AbstractFileSystem, path: str, size: int | None = None
    ) -> tuple[str, str] | None:
        """The least and greatest key of a record-index log file (None: it holds none),
        cached: a lookup compares its keys' range with each log's before matching them. Its
        first and last key: :func:`index_log_table` sorts them (a text ``min_max`` of 10,000
        keys costs 0.1-0.25 ms)."""

        def bounds(size: int) -> tuple[str, str] | None:
            keys = self.index_table(fs, path, size).column(KEY)
            return None if not len(keys) else (keys[0].as_py(), keys[-1].as_py())

        return self._get(fs, path, size, "#bounds", bounds)

    def _get(
        self,
        fs: AbstractFileSystem,
        path: str,
        size: int | None,
        kind: str,
        make: Callable[[int], T],
    ) -> T:
        """The cached ``kind`` of the log file ``path`` of ``size`` bytes, or ``make(size)``
        remembered."""
        size = int(fs.size(path)) if size is None else size
        key = (f"{path}{kind}", size)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make(size)
        self._put(key, value)
        return value

    def remember_index_table(self, path: str, size: int, table: pa.Table) -> None:
        """Seed the cache with a record-index log file its writer has in hand as columns
        (the file of ``size`` bytes holds exactly these rows), so the next lookup in this
        process need not decode it."""
        self._put((f"{path}#columns", size), table.select(_INDEX_FIELDS).cast(INDEX_LOG_SCHEMA))

    def clear(self) -> None:
        """Forget every cached file (a benchmark's cold read)."""
        with self._lock:
            self._items.clear()

    def _put(self, key: tuple[str, int], value: object) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


LOGS = _LogCache()


def index_log_table(blocks: list[LogBlock]) -> pa.Table:
    """The net record-index changes of one log file's blocks as columns (newest wins), sorted
    by key, each key once (what :class:`KeyMatcher` needs to match wanted keys)."""
    tables = [_index_block_table(b) for b in blocks if b.block_type is not BlockType.COMMAND]
    if not tables:
        return INDEX_LOG_SCHEMA.empty_table()
    if len(tables) == 1 and _ascending(tables[0].column(KEY)):
        return tables[0]
    ranked = [
        t.append_column("_n", pa.array(np.full(len(t), i, np.int32))) for i, t in enumerate(tables)
    ]
    merged = first_per_key(pa.concat_tables(ranked), KEY, [("_n", "descending")])
    return merged.drop_columns(["_n"])


def _ascending(keys: pa.ChunkedArray) -> bool:
    """Whether ``keys`` are strictly ascending (every writer sorts a block's keys)."""
    return len(keys) < 2 or bool(pc.all(pc.greater(keys[1:], keys[:-1])).as_py())


def _index_block_table(block: LogBlock) -> pa.Table:
    """One record-index log block as columns."""
    if block.table is not None:  # a columnar block: the columns as they are
        return block.table
    if block.block_type is BlockType.DELETE:
        n = len(block.keys)
        columns = [block.keys, [""] * n, [0] * n, [0] * n, [0] * n, [True] * n]
    else:
        columns = [list(map(operator.attrgetter(f), block.records)) for f in _INDEX_FIELDS]
    table = pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, INDEX_LOG_SCHEMA, strict=True)],
        schema=INDEX_LOG_SCHEMA,
    )
    return table
