"""Values derived from a frozen object, computed once per object and dropped with it.

Timelines and read points are frozen values that many functions derive the same things from
(a timeline's completion order, a read point's rank of each visible instant). :func:`memo`
keeps each derived value beside the object's identity until the object is collected; the
object's class must allow weak references (``msgspec.Struct(..., weakref=True)``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_MEMO: dict[int, dict[str, Any]] = {}  # id(object) -> {name: derived value}


def memo(owner: object, name: str, compute: Callable[[], T]) -> T:
    """``compute()`` the first time ``name`` is asked of ``owner``, then the same value."""
    key = id(owner)
    entry = _MEMO.get(key)
    if entry is None:
        entry = _MEMO[key] = {}
        weakref.finalize(owner, _MEMO.pop, key, None)
    if name not in entry:
        entry[name] = compute()
    return entry[name]
