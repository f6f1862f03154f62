"""Timelines as pure values: a :class:`Timeline` is a function of a folder listing.

The loader (``timeline.store``) lists a timeline folder and calls :meth:`Timeline.from_names`;
everything here is pure and never touches storage. Each ``(time, action)`` is one instant; the
timeline keeps its latest state and remembers which state files exist (used to check
transitions).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

import msgspec

from lakebraid.timeline.errors import IllegalTransitionError, InstantExistsError
from lakebraid.timeline.instant import Action, Instant, State, parse
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.memo import memo

_BUILT: dict[tuple[TimelineKind, frozenset[str], str | None], Timeline] = {}  # listing -> timeline
_LAST: dict[tuple[TimelineKind, str | None], tuple[frozenset[str], Timeline]] = {}  # newest built


class Timeline(msgspec.Struct, frozen=True, weakref=True):
    """One timeline's instants (see the module doc)."""

    kind: TimelineKind
    instants: tuple[Instant, ...]  # latest state per (time, action), ordered by time
    # every state file found (a joined timeline's: its newer part's; see has_file)
    files: frozenset[Instant] = frozenset()

    @classmethod
    def from_names(
        cls,
        kind: TimelineKind,
        names: Iterable[str],
        *,
        folder: str | None = None,
        after: str | None = None,
    ) -> Timeline:
        """Build a timeline from file names; temporary (dot) files are skipped, other names
        that are not instant files raise :class:`InstantFileError` naming them. With
        ``after``, instants at or before that time are left out (the archive holds them)."""
        listed = frozenset(n for n in names if not n.startswith("."))
        known = _BUILT.get((kind, listed, after))
        if known is None:  # a pure function of the listing: rebuilt only when it changes
            last = _LAST.get((kind, after))
            if last is None or not last[0] <= listed:  # a file went since: parsed whole
                last = (frozenset(), cls(kind, ()))
            parsed = [parse(n, folder=folder) for n in listed - last[0]]
            if after is not None:
                parsed = [i for i in parsed if i.time > after]
            known = last[1].grown(parsed)  # only the files added since
            if len(_BUILT) >= 64:
                _BUILT.clear()
                _LAST.clear()  # one entry per archive horizon seen: bounded with the rest
            _BUILT[(kind, listed, after)] = known
            _LAST[(kind, after)] = (listed, known)
        return known

    def grown(self, files: Iterable[Instant]) -> Timeline:
        """This timeline with more state files: the latest state of each (time, action) among
        its files and ``files``, ordered by time (a listing after a write's creates is built
        without ranking the files already in hand)."""
        added = frozenset(files) - self.files
        if not added:
            return self
        latest = {i.time + i.action: i for i in self.instants}
        for inst in added:
            key = inst.time + inst.action
            if key not in latest or inst.state.rank > latest[key].state.rank:
                latest[key] = inst
        ordered = tuple(sorted(latest.values(), key=Instant.sort_key))
        return Timeline(self.kind, ordered, self.files | added)

    def joined(self, newer: Timeline) -> Timeline:
        """This timeline followed by ``newer``, whose instants are all later (an archived
        part and the active part after it)."""
        if not self.instants:
            return newer
        if newer.instants and newer.instants[0].time <= self.instants[-1].time:
            raise ValueError("joined timelines overlap")
        # the newer part's files only (no copy of the long part's set: see has_file)
        joined = Timeline(self.kind, self.instants + newer.instants, newer.files)
        # what a timeline derives, from this (long-lived) part's and the few newer instants
        memo(
            joined,
            "by_completion",
            lambda: _merged(self.by_completion_view(), newer.by_completion_view()),
        )
        both = self.completed().instants + newer.completed().instants
        memo(joined, "completed", lambda: Timeline(self.kind, both, joined.files))
        pending = self.pending().instants + newer.pending().instants
        memo(joined, "pending", lambda: Timeline(self.kind, pending, joined.files))
        newest = [t for t in (self.max_time(), newer.max_time()) if t]
        memo(joined, "max_time", lambda: max(newest, default=None))
        memo(joined, "parts", lambda: (self, newer))  # for of_action, derived lazily
        return joined

    @classmethod
    def from_instants(cls, kind: TimelineKind, files: Iterable[Instant]) -> Timeline:
        return cls(kind, ()).grown(files)

    # ---- selection -------------------------------------------------------------------
    def __iter__(self) -> Iterator[Instant]:
        return iter(self.instants)

    def __len__(self) -> int:
        return len(self.instants)

    def filter(
        self,
        *,
        actions: Iterable[Action] | None = None,
        states: Iterable[State] | None = None,
        start: str | None = None,
        end: str | None = None,
    ) -> Timeline:
        """Instants with the given actions/states and ``start <= time <= end``."""
        action_set = set(actions) if actions is not None else None
        state_set = set(states) if states is not None else None
        kept = tuple(
            i
            for i in self.instants
            if (action_set is None or i.action in action_set)
            and (state_set is None or i.state in state_set)
            and (start is None or i.time >= start)
            and (end is None or i.time <= end)
        )
        return Timeline(self.kind, kept, self.files)

    def completed(self) -> Timeline:
        return memo(self, "completed", lambda: self.filter(states=[State.COMPLETED]))

    def pending(self) -> Timeline:
        return memo(self, "pending", lambda: self.filter(states=[State.REQUESTED, State.INFLIGHT]))

    def by_time(self) -> list[Instant]:
        return list(self.instants)

    def by_completion(self, as_of: str | None = None) -> list[Instant]:
        """Completed instants in completion order (ties impossible: times are unique)."""
        return list(self.completed_until(as_of))

    def completed_until(self, point: str | None) -> tuple[Instant, ...]:
        """Completed instants whose completion time is at or before ``point`` (None: all), in
        completion order (a slice of the remembered tuple)."""
        done = self.by_completion_view()
        if point is None:
            return done
        return done[: bisect.bisect_right(done, point, key=lambda i: i.completion_time)]

    def by_completion_view(self) -> tuple[Instant, ...]:
        """:meth:`by_completion` as the remembered tuple itself (no copy)."""
        return memo(self, "by_completion", self._by_completion)

    def _by_completion(self) -> tuple[Instant, ...]:
        return tuple(
            sorted((i for i in self.instants if i.is_completed), key=Instant.completion_key)
        )

    def of_action(self, action: Action) -> tuple[Instant, ...]:
        """The completed instants of ``action`` in completion order (remembered; a joined
        timeline's from its parts', so the long archived part is scanned once)."""
        return memo(self, f"of:{action}", lambda: self._of_action(action))

    def _parts(self) -> tuple[Timeline, Timeline] | None:
        """The archived and active parts of a joined timeline (None: not joined)."""
        return memo(self, "parts", lambda: None)

    def _of_action(self, action: Action) -> tuple[Instant, ...]:
        parts = self._parts()
        if parts is not None:
            older, newer = parts
            return _merged(older.of_action(action), newer.of_action(action))
        return tuple(i for i in self.by_completion_view() if i.action is action)

    def after(self, time: str | None) -> tuple[Instant, ...]:
        """The instants after ``time`` (None: all; binary search)."""
        if time is None:
            return self.instants
        return self.instants[bisect.bisect_right(self.instants, time, key=lambda i: i.time) :]

    def since(self, time: str) -> tuple[Instant, ...]:
        """The instants at or after ``time`` (binary search: instants are in time order)."""
        return self.instants[bisect.bisect_left(self.instants, time, key=lambda i: i.time) :]

    def completed_after(self, point: str | None) -> tuple[Instant, ...]:
        """Completed instants whose completion time is after ``point`` (None: all), in
        completion order."""
        done = self.by_completion_view()
        if point is None:
            return done
        return done[bisect.bisect_right(done, point, key=lambda i: i.completion_time) :]

    def at_time(self, time: str) -> tuple[Instant, ...]:
        """The instants at ``time`` (one per action; binary search: instants are in time
        order)."""
        start = bisect.bisect_left(self.instants, time, key=lambda i: i.time)
        end = start
        while end < len(self.instants) and self.instants[end].time == time:
            end += 1
        return self.instants[start:end]

    def get(self, time: str, action: Action | None = None) -> Instant | None:
        for inst in self.at_time(time):
            if action is None or inst.action == action:
                return inst
        return None

    def latest_completed(self) -> Instant | None:
        done = self.by_completion()
        return done[-1] if done else None

    def max_time(self) -> str | None:
        """The greatest instant or completion time on this timeline."""
        return memo(self, "max_time", self._max_time)

    def _max_time(self) -> str | None:
        times = [t for i in self.instants for t in (i.time, i.completion_time) if t]
        return max(times, default=None)

    def has_file(self, instant: Instant) -> bool:
        """Whether this state file was found (in a joined timeline: in either part)."""
        if instant in self.files:
            return True
        parts = self._parts()
        return parts is not None and parts[0].has_file(instant)

    def all_files(self) -> frozenset[Instant]:
        """Every state file found, in both parts of a joined timeline (built on demand)."""
        parts = self._parts()
        return self.files if parts is None else parts[0].all_files() | self.files

    def states_of(self, time: str, action: Action) -> set[State]:
        """The state files present for ``(time, action)``."""
        found = {
            state
            for state in (State.REQUESTED, State.INFLIGHT)
            if self.has_file(Instant(time, action, state))
        }
        latest = self.get(time, action)
        if latest is not None and latest.is_completed and self.has_file(latest):
            found.add(State.COMPLETED)
        return found


def _merged(done: tuple[Instant, ...], added: tuple[Instant, ...]) -> tuple[Instant, ...]:
    """``done`` and ``added`` (each in completion order) merged; only the tail of ``done``
    that completed after the earliest of ``added`` is touched."""
    if not added:
        return done
    split = bisect.bisect_right(done, added[0].completion_key(), key=Instant.completion_key)
    return done[:split] + tuple(sorted(done[split:] + added, key=Instant.completion_key))


def check_transition(timeline: Timeline, time: str, action: Action, target: State) -> None:
    """Refuse any move but requested -> inflight -> completed, each once, per instant."""
    states = timeline.states_of(time, action)
    where = f"{time}.{action} on the {timeline.kind} timeline"
    others = {i.action for i in timeline.at_time(time) if i.action != action}
    if others:
        raise IllegalTransitionError(
            f"{where}: time {time} is already used by {sorted(others)}", instant=time
        )
    if State.COMPLETED in states:
        raise InstantExistsError(
            f"{where} is already completed; a completed instant is final "
            "(roll it back and write a new instant instead)",
            instant=time,
        )
    if target in states:
        raise InstantExistsError(f"{where} is already {target}", instant=time)
    required = {
        State.REQUESTED: None,
        State.INFLIGHT: State.REQUESTED,
        State.COMPLETED: State.INFLIGHT,
    }[target]
    if required is None and states:
        raise IllegalTransitionError(f"{where} exists already ({sorted(states)})", instant=time)
    if required is not None and required not in states:
        raise IllegalTransitionError(
            f"{where} cannot become {target}: it is not {required} "
            f"(states present: {sorted(states) or 'none'})",
            instant=time,
        )
    if target is State.REQUESTED and timeline.instants and timeline.instants[-1].time > time:
        newest = timeline.instants[-1].time
        raise IllegalTransitionError(
            f"{where}: cannot request an instant older than {newest} already on the timeline; "
            "take a new instant time under the table lock",
            instant=time,
        )
