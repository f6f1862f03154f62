"""The lease records of the table lock on object stores (``timeline.lease``).

Layout (format version 1)::

    .braid/lease/<seq, 20 digits>.json    one record per change, never overwritten

A record is msgspec JSON of :class:`LeaseRecord`, for example::

    {"version":1,"seq":7,"owner":"host:4242","token":"9f..","lease_ms":30000,
     "clock":"20261203050133123","pending":{"path":"s3://b/t/.braid/global/...commit",
     "body":"eyJvcGVyYXRpb24iOi..."}}

``owner`` holds the lock from then on (``None`` once released), ``token`` names the
acquisition, ``lease_ms`` is how long the lease lasts without renewal, ``clock`` the last
instant time issued and ``pending`` a global completion decided but maybe not yet written
(``body`` base64, as msgspec encodes bytes). A reader refuses another version by name.
"""

from __future__ import annotations

import re

import msgspec

from lakebraid.timeline.errors import TimelineError

FORMAT_VERSION = 1
_DIGITS = 20
NAME = re.compile(rf"\d{{{_DIGITS}}}\.json")


class Pending(msgspec.Struct, frozen=True):
    """A decided global completion: the instant file to write and its body."""

    path: str
    body: bytes


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    version: int = FORMAT_VERSION
    seq: int
    owner: str | None
    token: str | None = None  # the acquisition the record belongs to
    lease_ms: int
    clock: str | None = None
    pending: Pending | None = None


ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(LeaseRecord)


def record_name(seq: int) -> str:
    return f"{seq:0{_DIGITS}d}.json"


def decode_record(data: bytes, where: str) -> LeaseRecord:
    try:
        record = _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise TimelineError(f"lease record {where} is malformed: {exc}") from None
    if record.version != FORMAT_VERSION:
        raise TimelineError(
            f"lease record {where} has format version {record.version}; this lakebraid reads "
            f"version {FORMAT_VERSION}: upgrade lakebraid"
        )
    return record


def record_seq(name: str) -> int:
    """The sequence number of a record's file name (one that :data:`NAME` matches)."""
    return int(name[:_DIGITS])
