"""Errors of the write client.

* :class:`WriteError` -- base of the package's errors.
* :class:`InputError` -- the data handed to a write is unusable (null keys, a missing key or
  partition column, a column whose type differs from the table's); raised before anything is
  written, so the table is unchanged.
"""

from __future__ import annotations

from timeline.errors import LakebraidError


class WriteError(LakebraidError):
    """Base of the write client's errors."""


class InputError(WriteError):
    """The input of a write is invalid; nothing was written."""
