"""Every path lakebraid reads or writes is built here (format version 1).

::

    <base>/
      .braid/table.json                 table config (timeline.table_config)
      .braid/clock                      last instant time issued (under the lock)
      .braid/timeline/                  data timeline
      .braid/global/                    global timeline: the commit point
      .braid/archive/                   archived instants of all three timelines
      .braid/markers/<instant>/         markers of the files an in-flight write creates
      .braid/heartbeats/<instant>       liveness of an in-flight writer
      .braid/lock                       the table lock (filelock; local and mounted disks)
      .braid/lease/<seq>.json           the table lock on object stores (timeline.lease)
      .braid/staging/<job id>/          rows a Spark data source write stages until its commit
      .braid/metadata/.braid/timeline/  metadata timeline
      .braid/metadata/<partition>/      metadata partitions (files, column_stats, record_index)
      <partition path>/<file id>_<write token>_<instant>.parquet   data base files
      <partition path>/<file id>_<write token>_<instant>.log       data log files (merge-on-read)

Partition paths are Hive style, ``field=value`` per partition field joined by ``/``. Values
are percent-encoded: every byte of the UTF-8 value outside ``[A-Za-z0-9._~-]`` becomes
``%XX`` (so ``/``, ``\\``, NUL and ``%`` can never reach the file system raw), and because each
segment starts with ``field=``, a value such as ``..`` stays a plain name inside the table. A
null value is ``__null__`` (a literal ``__null__`` string is written ``%5F_null__``). An
encoded segment longer than :data:`MAX_SEGMENT_BYTES` is refused, as are field names that are
not identifiers.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

from lakebraid.timeline.errors import InvalidPathError

BRAID_DIR = ".braid"
MAX_SEGMENT_BYTES = 200
NULL_VALUE = "__null__"
_SAFE = "._~-"
_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_HEX_RE = re.compile(r"%[0-9A-F]{2}")
_ENCODED_RE = re.compile(r"^(?:[A-Za-z0-9._~-]|%[0-9A-F]{2})*$")
_FILE_ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9-]{1,64}$")


class TimelineKind(enum.StrEnum):
    DATA = "data"
    METADATA = "metadata"
    GLOBAL = "global"


def check_field_name(name: str) -> str:
    if not isinstance(name, str) or not _FIELD_RE.match(name):
        raise InvalidPathError(
            f"field name {name!r} cannot name a partition folder: use letters, digits and _ "
            "(not starting with a digit, at most 128 characters)"
        )
    return name


def encode_value(value: str | None, *, field: str = "?") -> str:
    """Percent-encode one partition value (``None`` is the null marker)."""
    if value is None:
        return NULL_VALUE
    if not isinstance(value, str):
        raise InvalidPathError(f"partition value of {field!r} must be a string, got {value!r}")
    encoded = quote(value, safe=_SAFE, encoding="utf-8", errors="strict")
    if encoded == NULL_VALUE:
        encoded = "%5F" + encoded[1:]
    return encoded


def decode_value(encoded: str) -> str | None:
    if encoded == NULL_VALUE:
        return None
    if not _ENCODED_RE.match(encoded):
        raise InvalidPathError(f"{encoded!r} is not an encoded partition value")
    return unquote(encoded, encoding="utf-8", errors="strict")


def partition_path(fields: Sequence[str], values: Sequence[str | None]) -> str:
    """The relative folder of one partition: ``f1=v1/f2=v2`` ("" when unpartitioned)."""
    if len(fields) != len(values):
        raise InvalidPathError(f"partition fields {list(fields)} got {len(values)} values")
    segments = []
    for field, value in zip(fields, values, strict=True):
        segment = f"{check_field_name(field)}={encode_value(value, field=field)}"
        size = len(segment.encode())
        if size > MAX_SEGMENT_BYTES:
            raise InvalidPathError(
                f"partition value of {field!r} is too long: its folder name would be {size} "
                f"bytes (at most {MAX_SEGMENT_BYTES}); partition by a shorter or derived column"
            )
        segments.append(segment)
    return "/".join(segments)


def parse_partition_path(path: str, fields: Sequence[str]) -> tuple[str | None, ...]:
    """Inverse of :func:`partition_path`."""
    if path == "" and not fields:
        return ()
    segments = path.split("/")
    if len(segments) != len(fields):
        raise InvalidPathError(f"partition path {path!r} does not match fields {list(fields)}")
    values = []
    for field, segment in zip(fields, segments, strict=True):
        name, sep, encoded = segment.partition("=")
        if not sep or name != field:
            raise InvalidPathError(f"partition path {path!r}: expected {field}=<value>")
        values.append(decode_value(encoded))
    return tuple(values)


DATA_KINDS = {"parquet": "base", "log": "log"}  # extension -> kind of data file


def data_file_name(file_id: str, write_token: str, instant: str, kind: str = "base") -> str:
    """``<file id>_<write token>_<instant>.parquet`` (a base file) or ``.log`` (the log file of
    a merge-on-read file group that commit ``instant`` appended to)."""
    if not _FILE_ID_RE.match(file_id):
        raise InvalidPathError(f"file id {file_id!r} is not a lower-case UUID")
    if not _TOKEN_RE.match(write_token):
        raise InvalidPathError(f"write token {write_token!r} must be [A-Za-z0-9-], 1-64 chars")
    if not (len(instant) == 17 and instant.isdigit()):
        raise InvalidPathError(f"instant {instant!r} is not a 17-digit instant time")
    extension = {v: k for k, v in DATA_KINDS.items()}.get(kind)
    if extension is None:
        raise InvalidPathError(
            f"data file kind {kind!r} is not one of {sorted(DATA_KINDS.values())}"
        )
    return f"{file_id}_{write_token}_{instant}.{extension}"


@dataclass(frozen=True)
class DataFileName:
    file_id: str
    write_token: str
    instant: str
    kind: str = "base"  # "base" (.parquet) or "log" (.log)


@functools.lru_cache(maxsize=1 << 16)  # a pure function of the name; listings repeat names
def parse_data_file_name(name: str) -> DataFileName:
    stem, dot, ext = name.rpartition(".")
    parts = stem.split("_") if dot and ext in DATA_KINDS else []
    if len(parts) != 3:
        raise InvalidPathError(
            f"{name!r} is not a data file name <file id>_<token>_<instant>.parquet (or .log)"
        )
    parsed = DataFileName(*parts, kind=DATA_KINDS[ext])
    data_file_name(parsed.file_id, parsed.write_token, parsed.instant)
    return parsed


def data_file_name_of(name: str) -> DataFileName | None:
    """:func:`parse_data_file_name` of a name (a path's last part), None when it is not a
    data file name (a foreign file, a test's bytes)."""
    try:
        return parse_data_file_name(name.rsplit("/", 1)[-1])
    except InvalidPathError:
        return None


@dataclass(frozen=True)
class TableLayout:
    """Paths of one table. ``root`` is the fsspec path of the base folder (no protocol)."""

    root: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", self.root.rstrip("/") or "/")

    def _join(self, *parts: str) -> str:
        return "/".join([self.root, *parts]) if self.root != "/" else "/" + "/".join(parts)

    @property
    def braid_dir(self) -> str:
        return self._join(BRAID_DIR)

    @property
    def table_config(self) -> str:
        return self._join(BRAID_DIR, "table.json")

    @property
    def clock(self) -> str:
        return self._join(BRAID_DIR, "clock")

    @property
    def lock(self) -> str:
        return self._join(BRAID_DIR, "lock")

    @property
    def lease_dir(self) -> str:
        return self._join(BRAID_DIR, "lease")

    def timeline_dir(self, kind: TimelineKind) -> str:
        if kind is TimelineKind.DATA:
            return self._join(BRAID_DIR, "timeline")
        if kind is TimelineKind.GLOBAL:
            return self._join(BRAID_DIR, "global")
        return self._join(BRAID_DIR, "metadata", BRAID_DIR, "timeline")

    @property
    def archive_dir(self) -> str:
        """The timeline archive (``timeline.archive``)."""
        return self._join(BRAID_DIR, "archive")

    def markers_root(self) -> str:
        """The folder of every instant's markers folder (:meth:`markers_dir`)."""
        return self._join(BRAID_DIR, "markers")

    def markers_dir(self, instant: str) -> str:
        return self._join(BRAID_DIR, "markers", instant)

    @property
    def heartbeats_dir(self) -> str:
        return self._join(BRAID_DIR, "heartbeats")

    def heartbeat(self, instant: str) -> str:
        return self._join(BRAID_DIR, "heartbeats", instant)

    def staging_root(self) -> str:
        """The folder of every staging folder (:meth:`staging_dir`)."""
        return self._join(BRAID_DIR, "staging")

    def staging_dir(self, job_id: str) -> str:
        """Where one Spark data source write (``writers.engine.spark.datasource``) stages its
        rows."""
        if not _TOKEN_RE.match(job_id):
            raise InvalidPathError(f"job id {job_id!r} must be [A-Za-z0-9-], 1-64 chars")
        return f"{self.staging_root()}/{job_id}"

    @property
    def metadata_dir(self) -> str:
        return self._join(BRAID_DIR, "metadata")

    def metadata_partition_dir(self, partition: str) -> str:
        check_field_name(partition)
        return self._join(BRAID_DIR, "metadata", partition)

    def metadata_base_file(self, partition: str, file_group: str, instant: str) -> str:
        return f"{self.metadata_partition_dir(partition)}/{file_group}_{instant}.parquet"

    def metadata_log_file(self, partition: str, file_group: str, instant: str) -> str:
        return f"{self.metadata_partition_dir(partition)}/{file_group}_{instant}.log"

    def partition_dir(self, relative: str) -> str:
        """Folder of a partition path made by :func:`partition_path` (checked again here)."""
        if not relative:
            return self.root
        for segment in relative.split("/"):
            field, sep, encoded = segment.partition("=")
            if not sep or not _FIELD_RE.match(field) or not _ENCODED_RE.match(encoded):
                raise InvalidPathError(f"{relative!r} is not an encoded partition path")
        return self._join(relative)

    def data_file(self, relative_partition: str, file_name: str) -> str:
        return f"{self.partition_dir(relative_partition)}/{file_name}"
