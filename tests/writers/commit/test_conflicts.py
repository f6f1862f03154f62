"""The conflict rules as a scenario matrix: one row per rule, with the expected verdict.
Pure: no table, no files (``writers.commit.conflicts``)."""

from __future__ import annotations

import msgspec
import pytest

from lakebraid.timeline.instant import Action
from lakebraid.writers.commit.conflicts import Mine, Other, Verdict, check

T0, READ, MINE, LATER, LATEST = (f"2026112310000000{i}" for i in range(5))
G1, G2 = ("day=1", "a" * 8), ("day=2", "b" * 8)
ME = Mine(
    time=MINE,
    read_at=READ,
    groups=frozenset({G1}),
    reindexes_seen=frozenset({T0}),
    builds_seen=frozenset({READ}),
)
MY_KEYS = frozenset({"k1", "k2"})


def commit(time: str, done: str, groups=frozenset(), visible=True) -> Other:
    return Other(
        time=time, action=Action.COMMIT, completion_time=done, visible=visible, groups=groups
    )


SCENARIOS = {
    "nothing happened": ([], {}, Verdict()),
    "an index build began after this write chose its layout (it lacks the entries)": (
        [Other(time=LATER, action=Action.INDEX, alive=True)],
        {},
        Verdict(conflicts=(LATER,)),
    ),
    "an index build completed after this write chose its layout": (
        [Other(time=LATER, action=Action.INDEX, completion_time=LATEST)],
        {},
        Verdict(conflicts=(LATER,)),
    ),
    "an index build running when this write chose its layout (it kept the entries)": (
        [Other(time=READ, action=Action.INDEX, completion_time=LATEST)],
        {},
        Verdict(),
    ),
    "an index build completed before this write chose its layout": (
        [Other(time=T0, action=Action.INDEX, completion_time=READ)],
        {},
        Verdict(),
    ),
    "a dead index build (never completes)": (
        [Other(time=LATER, action=Action.INDEX, alive=False)],
        {},
        Verdict(),
    ),
    "a reindex completed after this write chose its log layout": (
        [Other(time=LATER, action=Action.REINDEX, completion_time=LATEST)],
        {},
        Verdict(conflicts=(LATER,)),
    ),
    "a reindex completed before this write chose its log layout": (
        [Other(time=T0, action=Action.REINDEX, completion_time=READ)],
        {},
        Verdict(),
    ),
    "a reindex running (its heartbeat is live)": (
        [Other(time=LATER, action=Action.REINDEX, alive=True)],
        {},
        Verdict(conflicts=(LATER,)),
    ),
    "a dead reindex (pending, heartbeat expired: never completes)": (
        [Other(time=LATER, action=Action.REINDEX, alive=False)],
        {},
        Verdict(),
    ),
    "overlapping file group": (
        [commit(LATER, LATEST, frozenset({G1}))],
        {},
        Verdict(conflicts=(LATER,)),
    ),
    "overlapping key in another group": (
        [commit(LATER, LATEST, frozenset({G2}))],
        {LATER: {"k2"}},
        Verdict(conflicts=(LATER,)),
    ),
    "disjoint groups and keys": (
        [commit(LATER, LATEST, frozenset({G2}))],
        {LATER: {"z"}},
        Verdict(),
    ),
    "overlap completed before the read point": (
        [commit(T0, READ, frozenset({G1}))],
        {T0: MY_KEYS},
        Verdict(),
    ),
    "overlapping commit since undone (not visible)": (
        [commit(LATER, LATEST, frozenset({G1}), visible=False)],
        {},
        Verdict(),
    ),
    "a rollback of this write (recovery judged it dead)": (
        [Other(time=LATER, action=Action.ROLLBACK, target=MINE)],
        {},
        Verdict(undone_by=LATER),
    ),
    "a rollback of another write": (
        [Other(time=LATER, action=Action.ROLLBACK, target=T0)],
        {},
        Verdict(),
    ),
    "a restore to before this write": (
        [Other(time=LATER, action=Action.RESTORE, target=T0)],
        {},
        Verdict(undone_by=LATER),
    ),
    "a restore requested before this write began, completed before its read point": (
        [Other(time=T0, action=Action.RESTORE, completion_time=READ, target=T0)],
        {},
        Verdict(),
    ),
    "a restore requested before this write began, still pending (it undoes what it read)": (
        [Other(time=READ, action=Action.RESTORE, target=T0)],
        {},
        Verdict(conflicts=(READ,)),
    ),
    "a restore requested before this write began, completed since its read point": (
        [Other(time=READ, action=Action.RESTORE, completion_time=LATEST, target=T0)],
        {},
        Verdict(conflicts=(READ,)),
    ),
    "a rollback, completed since the read point, of a commit the reads saw": (
        [
            Other(
                time=LATER,
                action=Action.ROLLBACK,
                completion_time=LATEST,
                target=T0,
                target_completed=READ,
            )
        ],
        {},
        Verdict(conflicts=(LATER,)),
    ),
    "a rollback still pending of a commit the reads saw (requested before this write)": (
        [Other(time=READ, action=Action.ROLLBACK, target=T0, target_completed=READ)],
        {},
        Verdict(conflicts=(READ,)),
    ),
    "a rollback completed before the read point": (
        [
            Other(
                time=READ,
                action=Action.ROLLBACK,
                completion_time=READ,
                target=T0,
                target_completed=T0,
            )
        ],
        {},
        Verdict(),
    ),
    "a rollback of a commit that never completed (a dead writer's)": (
        [Other(time=LATER, action=Action.ROLLBACK, completion_time=LATEST, target=T0)],
        {},
        Verdict(),
    ),
    "a rollback of a commit completed after the read point (the reads did not see it)": (
        [Other(time=LATER, action=Action.ROLLBACK, target=T0, target_completed=LATEST)],
        {},
        Verdict(),
    ),
    "a table empty at the read point: a rollback completed since": (
        [
            Other(
                time=LATER,
                action=Action.ROLLBACK,
                completion_time=LATEST,
                target=T0,
                target_completed=T0,
            )
        ],
        {},
        Verdict(),
        None,
    ),
    "a clean in between": (
        [Other(time=LATER, action=Action.CLEAN, completion_time=LATEST, visible=True)],
        {},
        Verdict(),
    ),
    "a table empty at the read point: a key written before this write began": (
        [commit(T0, READ, frozenset({G2}))],
        {T0: {"k1"}},
        Verdict(conflicts=(T0,)),
        None,
    ),
    "a table empty at the read point: a group rewritten before this write began": (
        [commit(T0, READ, frozenset({G1}))],
        {},
        Verdict(conflicts=(T0,)),
        None,
    ),
    "a table empty at the read point: disjoint groups and keys": (
        [commit(T0, READ, frozenset({G2}))],
        {T0: {"z"}},
        Verdict(),
        None,
    ),
    "a metadata compaction in between": (
        [Other(time=LATER, action=Action.COMPACTION, completion_time=LATEST)],
        {},
        Verdict(),
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(name: str) -> None:
    others, keys, expected, *read_at = SCENARIOS[name]
    asked: list[str] = []

    def their_keys(time: str) -> frozenset[str]:
        asked.append(time)
        return frozenset(keys.get(time, set()))

    mine = msgspec.structs.replace(ME, read_at=read_at[0]) if read_at else ME
    assert check(mine, others, lambda: MY_KEYS, their_keys) == expected


def test_keys_are_read_only_for_commits_that_passed_the_group_rule() -> None:
    asked: list[str] = []
    others = [commit(LATER, LATEST, frozenset({G1})), commit(T0, READ, frozenset({G2}))]
    check(ME, others, lambda: MY_KEYS, lambda t: asked.append(t) or frozenset())  # type: ignore[func-returns-value]
    assert asked == [], "an overlapping group needs no key read; an old commit none either"
