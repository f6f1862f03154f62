"""Errors of the index package.

* :class:`IndexLayerError` -- base of every error the package raises.
* :class:`RecordKeyError` -- a record key (or a sequence of them) cannot be used: null, of a
  type whose text does not round-trip exactly, not convertible to the table's key type, or a
  bare string where a sequence of keys is expected. Raised before anything is written.
"""

from __future__ import annotations

from lakebraid.timeline.errors import LakebraidError


class IndexLayerError(LakebraidError):
    """Base of the index package's errors."""


class RecordKeyError(IndexLayerError):
    """A record key is unusable; nothing was written."""
