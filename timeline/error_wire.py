"""Errors carried out of a worker process as text, and raised again as themselves.

A Spark task runs in a Python worker; when it fails, PySpark passes only the text of the
worker's traceback to the driver, where it becomes pyspark's ``PythonException``. A caller of
lakebraid must still tell a conflict (``RetryableError``: retry) from an unknown outcome
(``StateUnknownError``) or a damaged file, and the commit envelope maps a missing file to
its own errors (``writers.commit.envelope``). So a function a worker runs is wrapped by
:func:`ships_errors`: a lakebraid error, or a ``FileNotFoundError``, leaving it is raised
again as a ``RuntimeError`` whose message is the error's *wire line*, chained to the original
(whose own traceback stays in the text). On the driver, :func:`executor_errors` finds the
last wire line in a failure's text and raises the error it describes, chained to Spark's.

**Wire line, version 1**: ``lakebraid-error 1 `` followed by one line of JSON (ASCII, no
newline), an object::

    {"module": "lakebraid.writers.errors", "class": "CorruptDataFileError",
     "args": ["corrupt data file /t/a.parquet: ..."],
     "fields": {"message": "...", "table": "/t", "instant": null, "path": "/t/a.parquet",
                "reason": "..."}}

``args`` are the exception's ``args`` and ``fields`` its attributes (an ``OSError``'s
``errno``, ``strerror`` and ``filename`` too), each kept when it is JSON's own (null, bool,
number, text, or a list of them), others left out. The error is
rebuilt without calling its ``__init__`` (whose parameters differ by class): its class is
found by module and name and must be a :class:`~lakebraid.timeline.errors.LakebraidError`
of lakebraid's own modules, or ``FileNotFoundError`` (rebuilt from ``errno``, ``strerror``,
``filename``); anything else is not raised again. A line that does not decode is ignored, so
a failure's text is never made worse than it was. Error messages may quote user data, but
JSON escapes every newline, so text inside a message cannot start a wire line of its own.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from lakebraid.timeline.errors import LakebraidError

WIRE = "lakebraid-error 1 "
_PACKAGE = __name__.split(".")[0] + "."  # lakebraid's own modules
P = ParamSpec("P")
T = TypeVar("T")


def wire_line(exc: BaseException) -> str | None:
    """The wire line of ``exc`` (None: not an error that travels: see the module doc)."""
    if isinstance(exc, LakebraidError):
        fields = dict(vars(exc))
    elif isinstance(exc, FileNotFoundError):
        fields = {}
    else:
        return None
    if isinstance(exc, OSError):  # its own attributes, which are not in vars()
        fields.update(errno=exc.errno, strerror=exc.strerror, filename=exc.filename)
    kind = type(exc)
    body = {
        "module": kind.__module__,
        "class": kind.__qualname__,
        "args": [a for a in exc.args if _plain(a)],
        "fields": {k: v for k, v in fields.items() if _plain(v)},
    }
    return WIRE + json.dumps(body, ensure_ascii=True)


def from_wire(text: str) -> BaseException | None:
    """The error of the last line of ``text`` holding a wire line, read from the first wire
    mark in that line (None: no such line, or it does not decode)."""
    for line in reversed(text.splitlines()):
        at = line.find(WIRE)
        if at < 0:
            continue
        try:
            body = json.loads(line[at + len(WIRE) :])
            return _rebuilt(body["module"], body["class"], body["args"], body["fields"])
        except (ValueError, TypeError, KeyError, AttributeError, ImportError):
            return None
    return None


def ships_errors(run: Callable[P, Iterator[T]]) -> Callable[P, Iterator[T]]:
    """``run`` (a generator function a worker process runs) with a lakebraid error or a
    missing file raised again as a ``RuntimeError`` holding its wire line (module doc)."""

    @functools.wraps(run)
    def shipping(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        try:
            yield from run(*args, **kwargs)
        except Exception as exc:
            line = wire_line(exc)  # the one place that says which errors travel
            if line is None:
                raise
            raise RuntimeError(line) from exc

    return shipping


@contextmanager
def executor_errors() -> Iterator[None]:
    """Raise the error a worker's failure carries (:func:`ships_errors`) as itself, chained
    to the failure; any other failure as it is."""
    try:
        yield
    except Exception as exc:
        found = from_wire(str(exc))
        if found is None:
            raise
        raise found from exc


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    return isinstance(value, list) and all(_plain(v) for v in value)


def _rebuilt(module: str, name: str, args: list[Any], fields: dict[str, Any]) -> BaseException:
    if module == "builtins" and name == "FileNotFoundError":
        return FileNotFoundError(fields["errno"], fields["strerror"], fields["filename"])
    if not module.startswith(_PACKAGE):
        raise ImportError(f"{module} is not a module of lakebraid")
    kind = getattr(importlib.import_module(module), name)
    if not (isinstance(kind, type) and issubclass(kind, LakebraidError)):
        raise TypeError(f"{module}.{name} is not a lakebraid error")
    exc = kind.__new__(kind)
    BaseException.__init__(exc, *args)
    for name, value in fields.items():
        setattr(exc, name, value)  # an OSError's errno, strerror, filename too
    return exc
