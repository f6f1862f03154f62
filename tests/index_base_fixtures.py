"""A record-index base file written as the metadata writer writes one (the tests of
``metadata.locations`` and of its coded rows share it)."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pyarrow as pa

from lakebraid.metadata import basefile
from lakebraid.metadata.basewrite import write_base

FS = fsspec.filesystem("file")


def write_index_base(path: Path, rows: pa.Table, row_group_rows: int = 4) -> str:
    """``rows`` as the base file ``path`` of group ``record_index-0000`` (footer cache
    cleared: a reader reads the file itself)."""
    write_base(
        FS,
        str(path),
        rows,
        partition="record_index",
        file_group="record_index-0000",
        instant="20260101000000001",
        folded=[],
        row_group_rows=row_group_rows,
    )
    basefile.FOOTERS.clear()
    return str(path)
