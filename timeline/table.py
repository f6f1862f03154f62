"""A table as the timeline layer sees it: its layout, config, lock and instant store.

Lives on the driver only: never send a :class:`TableTimelines` to Spark executors (give them
plain paths and values instead).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from fsspec import AbstractFileSystem

from lakebraid.timeline import config as cfg
from lakebraid.timeline import table_config
from lakebraid.timeline.as_of import AsOfError, check_point, parse_as_of
from lakebraid.timeline.bodies import (
    CleanBody,
    RestoreBody,
    RollbackBody,
    SavepointBody,
)
from lakebraid.timeline.durable import check_bucket, filesystem, is_local, put_if_absent
from lakebraid.timeline.errors import ConfigError, InstantExistsError
from lakebraid.timeline.heartbeat import Heartbeat, dead_pending, is_beating, now_ms, read_beat
from lakebraid.timeline.instant import Action, Instant
from lakebraid.timeline.layout import BRAID_DIR, TableLayout, TimelineKind
from lakebraid.timeline.lock import make_lock
from lakebraid.timeline.store import InstantStore
from lakebraid.timeline.table_config import TableConfig
from lakebraid.timeline.timeline import Timeline
from lakebraid.timeline.visibility import UndoBody, Visibility, resolve, undoers


class TableTimelines:
    def __init__(
        self, fs: AbstractFileSystem, layout: TableLayout, config: TableConfig, options: cfg.Options
    ):
        self.fs = fs
        self.layout = layout
        self.config = config
        self.options = options
        interval, expiry = (
            options.get(cfg.HEARTBEAT_INTERVAL_MS),
            options.get(cfg.HEARTBEAT_EXPIRY_MS),
        )
        if interval >= expiry:
            raise ConfigError(
                f"heartbeat.interval.ms ({interval}) must be shorter than heartbeat.expiry.ms "
                f"({expiry}), or live writers would look dead",
                table=layout.root,
            )
        keep, most = options.get(cfg.ARCHIVE_MIN), options.get(cfg.ARCHIVE_MAX)
        if keep >= most:
            raise ConfigError(
                f"archive.min.instants ({keep}) must be less than archive.max.instants "
                f"({most}): archival keeps the first and starts above the second",
                table=layout.root,
            )
        self.lock = make_lock(
            fs, layout, options.get(cfg.LOCK_TIMEOUT_S), options.get(cfg.LOCK_LEASE_MS)
        )
        self._undo_bodies: dict[Instant, UndoBody] = {}
        # id(timeline) -> (that timeline, kept alive so the id stays its, {as_of: visibility})
        self._visibility: dict[int, tuple[Timeline, dict[str | None, Visibility]]] = {}
        self.store = InstantStore(fs, layout, self.lock)

    @property
    def path(self) -> str:
        return self.layout.root

    # ---- create / open ---------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str,
        config: TableConfig,
        runtime_options: Mapping[str, object] | None = None,
        storage_options: Mapping[str, object] | None = None,
    ) -> TableTimelines:
        fs, root = filesystem(path, storage_options)
        layout = TableLayout(root)
        options = cfg.Options({**config.options, **(runtime_options or {})})
        config.validate()
        check_bucket(fs, root)
        _check_not_nested(fs, root)
        try:
            fs.makedirs(layout.braid_dir, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ConfigError(
                f"cannot create a table at {root}: a file is in the way (the path or a folder "
                "above it is a file); choose another path",
                table=root,
            ) from None
        table = cls(fs, layout, config, options)
        for kind in TimelineKind:
            fs.makedirs(layout.timeline_dir(kind), exist_ok=True)
        with table.lock:
            created = (
                config if config.created_at else _with_created(config, table.store.next_time())
            )
            try:
                put_if_absent(fs, layout.table_config, table_config.encode(created))
            except InstantExistsError:
                raise ConfigError(
                    f"a lakebraid table already exists at {root}; open it instead of creating",
                    table=root,
                ) from None
        if not is_local(fs):  # a store lists a missing folder in two requests, a present one
            fs.pipe_file(f"{layout.archive_dir}/.keep", b"")  # in one: every reader lists this
        table.config = created
        return table

    @classmethod
    def open(
        cls,
        path: str,
        runtime_options: Mapping[str, object] | None = None,
        storage_options: Mapping[str, object] | None = None,
    ) -> TableTimelines:
        fs, root = filesystem(path, storage_options)
        layout = TableLayout(root)
        try:
            data = fs.cat_file(layout.table_config)
        except (FileNotFoundError, NotADirectoryError):  # no folder, or a file at the path
            raise ConfigError(
                f"no lakebraid table at {root} ({layout.table_config} is missing); "
                "check the path or create the table first",
                table=root,
            ) from None
        config = table_config.decode(data, path=layout.table_config)
        options = cfg.Options({**config.options, **(runtime_options or {})})
        return cls(fs, layout, config, options)

    # ---- timelines and visibility ----------------------------------------------------
    def timeline(self, kind: TimelineKind | str = TimelineKind.GLOBAL) -> Timeline:
        try:
            which = TimelineKind(kind)
        except ValueError:
            names = ", ".join(k.value for k in TimelineKind)
            message = f"no timeline {kind!r:.40}: one of {names}"
            raise ConfigError(message, table=self.path) from None
        return self.store.load(which)

    def undo_bodies(self, global_timeline: Timeline) -> dict[str, UndoBody]:
        """The bodies of the completed rollbacks and restores (a completed body never
        changes: each is read once per client)."""
        bodies: dict[str, UndoBody] = {}
        undos = global_timeline.of_action(Action.ROLLBACK) + global_timeline.of_action(
            Action.RESTORE
        )
        for inst in sorted(undos, key=lambda i: i.time):
            known = self._undo_bodies.get(inst)
            if known is None:
                body_type = RollbackBody if inst.action is Action.ROLLBACK else RestoreBody
                known = self.store.read_typed(TimelineKind.GLOBAL, inst, body_type)
                self._undo_bodies[inst] = known
            bodies[inst.time] = known
        return bodies

    def visibility(
        self, as_of: str | None = None, global_timeline: Timeline | None = None
    ) -> Visibility:
        """What is visible as of ``as_of`` (``visibility.resolve``); remembered per timeline
        value (timelines are frozen, and loads of an unchanged listing return the same one)."""
        tl = global_timeline if global_timeline is not None else self.timeline()
        seen = self._visibility.get(id(tl))
        if seen is None or seen[0] is not tl:
            if len(self._visibility) >= 8:
                self._visibility.clear()
            seen = self._visibility[id(tl)] = (tl, {})
        found = seen[1].get(as_of)
        if found is None:
            found = seen[1][as_of] = resolve(tl, self.undo_bodies(tl), as_of_point(tl, as_of))
        return found

    def savepointed(self, visibility: Visibility | None = None) -> dict[str, str]:
        """Visible savepoints of visible commits: savepointed commit time -> savepoint instant
        time. A savepoint whose commit a restore to an earlier savepoint undid keeps nothing
        and restores nothing: left out."""
        visibility = visibility if visibility is not None else self.visibility()
        found = {}
        for inst in visibility.visible:
            if inst.action is Action.SAVEPOINT:
                body = self.store.read_typed(TimelineKind.GLOBAL, inst, SavepointBody)
                if visibility.is_visible(body.target):
                    found[body.target] = inst.time
        return found

    def retained_from(self, global_timeline: Timeline, visibility: Visibility) -> str | None:
        """Completion time of the earliest commit the cleaner keeps (None: no clean ran);
        reads as of earlier points need a savepoint. The latest horizon any clean cut: of
        the visible clean completed last, of the cleans that started after it (one finished
        by recovery completes after later cleans that cut further: :func:`_last_cleans`),
        and of any clean still pending (it deletes before it completes)."""
        cleans = _last_cleans([i for i in visibility.visible if i.action is Action.CLEAN])
        cleans += [
            i
            for i in global_timeline.pending()
            if i.action is Action.CLEAN and i.time not in visibility.undone
        ]
        kept = [
            global_timeline.get(
                self.store.read_typed(TimelineKind.GLOBAL, inst, CleanBody).earliest_retained
            )
            for inst in cleans
        ]
        return max((i.completion_time for i in kept if i and i.completion_time), default=None)

    def read_point(self, as_of: object, global_timeline: Timeline | None = None) -> str | None:
        """A user's ``as_of`` (``timeline.as_of``) as a checked completion-time read point:
        :class:`timeline.as_of.AsOfError` when malformed or outside the readable history."""
        parsed = parse_as_of(as_of, table=self.path)
        if parsed is None:
            return None
        tl = global_timeline if global_timeline is not None else self.timeline()
        point = as_of_point(tl, parsed)
        assert point is not None
        bodies = self.undo_bodies(tl)
        now = resolve(tl, bodies)
        if parsed in now.undone:  # a write's own time: "after that write", which was undone
            by = undoers(tl, bodies).get(parsed)
            raise AsOfError(
                f"as_of {as_of!r} names write {parsed}, undone by "
                f"{f'instant {by}' if by else 'a rollback or restore'}: no readable state holds "
                "its changes; read as of an earlier time for the state before it, or omit as_of "
                "for the current state",
                table=self.path,
                instant=parsed,
            )
        done = [i.completion_time for i in tl.completed() if i.completion_time]
        retained = self.retained_from(tl, now)
        savepointed: dict[str, str] = {}
        latest_commit = None
        if retained is not None and point < retained:  # only then may a savepoint allow it
            savepointed = self.savepointed(now)
            at_point = resolve(tl, bodies, point)
            commits = [i.time for i in at_point.visible if i.action is Action.COMMIT]
            latest_commit = commits[-1] if commits else None
        check_point(
            point,
            created_at=self.config.created_at,
            latest=max(done, default=self.config.created_at),
            retained_from=retained,
            savepointed=savepointed,
            latest_commit_at_point=latest_commit,
            table=self.path,
            given=as_of,
        )
        return point

    def next_time(self) -> str:
        return self.store.next_time()

    def heartbeat(self, instant: str) -> Heartbeat:
        return Heartbeat(self.fs, self.layout, instant, self.options.get(cfg.HEARTBEAT_INTERVAL_MS))

    def is_alive(self, instant: str) -> bool:
        """Whether the writer of a pending ``instant`` still beats (``heartbeat.expiry.ms``)."""
        beat = read_beat(self.fs, self.layout, instant)
        return is_beating(beat, self.options.get(cfg.HEARTBEAT_EXPIRY_MS), now_ms())

    def dead_instants(self, at_ms: int | None = None) -> list[Instant]:
        """Pending instants of the global timeline whose writer is gone, minus those a
        completed rollback or restore already undid (nothing is left to do for them)."""
        expiry = self.options.get(cfg.HEARTBEAT_EXPIRY_MS)
        global_timeline = self.timeline()
        undone = self.visibility(global_timeline=global_timeline).undone
        dead = dead_pending(self.fs, self.layout, global_timeline, expiry, at_ms)
        return [inst for inst in dead if inst.time not in undone]


def as_of_point(global_timeline: Timeline, as_of: str | None) -> str | None:
    """``as_of`` as a completion-time read point. The time a write returned (its instant
    time) means "after that write": it becomes the instant's completion time. Any other time
    is a point in completion order as is (instant and completion times never collide: one
    clock issues both)."""
    if as_of is None:
        return None
    inst = global_timeline.get(as_of)
    if inst is not None and inst.completion_time is not None:
        return inst.completion_time
    return as_of


def _with_created(config: TableConfig, time: str) -> TableConfig:
    return msgspec.structs.replace(config, created_at=time)


def _check_not_nested(fs: AbstractFileSystem, root: str) -> None:
    """Refuse a table inside another table's folders: its files would be foreign files in
    the outer table's partitions (``validate`` reports them), or land in its ``.braid``."""
    parts = root.rstrip("/").split("/")
    if BRAID_DIR in parts:
        raise ConfigError(
            f"cannot create a table at {root}: it is inside a table's {BRAID_DIR} folder; "
            "choose a path outside every table",
            table=root,
        )
    for depth in range(len(parts) - 1, 0, -1):
        outer = "/".join(parts[:depth])
        if outer and fs.exists(TableLayout(outer).table_config):
            raise ConfigError(
                f"cannot create a table at {root}: it is inside the table at {outer}; "
                "choose a path outside every table",
                table=root,
            )


def _last_cleans(visible: list[Instant]) -> list[Instant]:
    """Of visible cleans in completion order, the last and those that started after it: the
    only ones whose plans can be newer, each completed while it was pending (a scan back to
    the first clean completed before it started, not of the whole history)."""
    if not visible:
        return []
    last = visible[-1]
    found = [last]
    for inst in reversed(visible[:-1]):
        if (inst.completion_time or "") < last.time:
            break
        if inst.time > last.time:
            found.append(inst)
    return found
