"""Errors carried out of a worker as text (``timeline.error_wire``): a lakebraid error or a
missing file raised in a wrapped generator comes back, from the text of its traceback, as an
error of the same class with the same message and attributes; anything else is left alone."""

from __future__ import annotations

import traceback

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakebraid.index.errors import RecordKeyError
from lakebraid.metadata.errors import MissingMetadataFileError
from lakebraid.timeline.error_wire import WIRE, executor_errors, from_wire, ships_errors
from lakebraid.timeline.errors import LakebraidError, LockLostError, StateUnknownError
from lakebraid.writers.errors import (
    ConflictDetected,
    CorruptDataFileError,
    CorruptDataLogError,
    LostCompletionError,
    VanishedFileError,
)

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)  # no lone surrogate
maybe = st.none() | texts


def errors() -> st.SearchStrategy[BaseException]:
    return st.one_of(
        st.builds(lambda m, t, i: VanishedFileError(m, table=t, instant=i), texts, maybe, maybe),
        st.builds(lambda m, t: LostCompletionError(m, table=t), texts, maybe),
        st.builds(lambda m, t: LockLostError(m, table=t), texts, maybe),
        st.builds(lambda m, t: RecordKeyError(m, table=t), texts, maybe),
        st.builds(lambda p, r, t: CorruptDataFileError(p, r, table=t), texts, texts, maybe),
        st.builds(
            lambda p, o, r: CorruptDataLogError(p, o, r), texts, st.integers(0, 2**40), texts
        ),
        st.builds(
            lambda m, o, t, i: ConflictDetected(m, others=o, table=t, instant=i),
            texts,
            st.lists(texts, max_size=3),
            texts,
            texts,
        ),
        st.builds(lambda p: FileNotFoundError(2, "No such file or directory", p), texts),
        st.builds(
            lambda m, p, t: MissingMetadataFileError(m, path=p, table=t), texts, texts, maybe
        ),
    )


def worker_text(exc: BaseException) -> str:
    """What a worker passes on: the full traceback text of ``exc`` leaving a wrapped task."""

    @ships_errors
    def task():
        yield 1
        raise exc

    with pytest.raises(RuntimeError) as raised:
        list(task())
    return "".join(traceback.format_exception(raised.value))


def same(a: BaseException, b: BaseException) -> None:
    assert type(a) is type(b)
    assert str(a) == str(b)
    assert a.args == b.args
    if isinstance(a, OSError):
        assert (a.errno, a.strerror, a.filename) == (b.errno, b.strerror, b.filename)
    if isinstance(a, LakebraidError):
        assert vars(a) == vars(b)


@given(errors())
def test_an_error_comes_back_from_its_traceback_text_as_itself(exc):
    back = from_wire(worker_text(exc))
    assert back is not None
    same(back, exc)


@given(errors(), texts)
def test_the_last_wire_line_wins_over_text_in_messages(exc, noise):
    """A message quoting a wire mark (user data in a key, a file name) does not change what
    comes back: the wire line of the error that left the task is the last one."""
    forged = LockLostError(f'{WIRE}{{"module": "os"}}\n{WIRE}{noise}')
    text = worker_text(forged) + "\nDuring handling of the above:\n" + worker_text(exc)
    back = from_wire(text)
    assert back is not None
    same(back, exc)


def test_other_failures_are_not_wrapped():
    @ships_errors
    def task():
        yield 1
        raise ValueError("not ours")

    with pytest.raises(ValueError, match="not ours"):
        list(task())


@pytest.mark.parametrize(
    "line",
    [
        "no mark at all",
        f"RuntimeError: {WIRE}{{not json",
        f'RuntimeError: {WIRE}{{"module": "os", "class": "error", "args": [], "fields": {{}}}}',
        f'{WIRE}{{"module": "lakebraid.timeline.errors", "class": "annotations", "args": [], '
        '"fields": {}}',
        f'{WIRE}{{"module": "lakebraid.timeline.nothing", "class": "X", "args": [], '
        '"fields": {}}',
        f'{WIRE}{{"module": "builtins", "class": "SystemExit", "args": [], "fields": {{}}}}',
        f'{WIRE}{{"module": "lakebraid.timeline.errors", "args": [], "fields": {{}}}}',
    ],
)
def test_a_line_that_does_not_decode_to_a_lakebraid_error_gives_nothing(line):
    assert from_wire(f"Traceback\n{line}\n") is None


def test_executor_errors_raises_the_carried_error_chained_to_the_failure():
    failure = RuntimeError(worker_text(StateUnknownError("outcome unknown", table="/t")))
    with pytest.raises(StateUnknownError, match=r"outcome unknown \[table /t\]") as raised:
        with executor_errors():
            raise failure
    assert raised.value.__cause__ is failure
    other = RuntimeError("executor lost")
    with pytest.raises(RuntimeError) as passed:
        with executor_errors():
            raise other
    assert passed.value is other


def test_a_rebuilt_error_is_still_a_lakebraid_error_of_its_families():
    back = from_wire(worker_text(LostCompletionError("lost", table="/t", instant="1")))
    assert isinstance(back, LakebraidError) and isinstance(back, StateUnknownError)
    assert (back.table, back.instant) == ("/t", "1")
