"""The ``lakebraid`` command line. Exit 0 on success; on failure a one-line reason, exit 1."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from lakebraid.timeline import progress
from lakebraid.timeline.errors import ConfigError, LakebraidError
from lakebraid.timeline.layout import TimelineKind
from lakebraid.timeline.table import TableTimelines
from lakebraid.writers.cli.history import add_commands as add_history_commands
from lakebraid.writers.cli.progress import progress_bars, wanted
from lakebraid.writers.client import WriteClient
from lakebraid.writers.services.rollback import rollback


def _instant_json(table: TableTimelines, kind: TimelineKind) -> list[dict[str, object]]:
    visible = table.visibility().times
    return [
        {
            "time": i.time,
            "action": i.action.value,
            "state": i.state.value,
            "completion_time": i.completion_time,
            "visible": i.time in visible if kind is TimelineKind.GLOBAL else None,
        }
        for i in table.timeline(kind)
    ]


def format_timeline(table: TableTimelines, kind: TimelineKind) -> str:
    rows = _instant_json(table, kind)
    lines = [f"{kind.value} timeline of {table.path} ({len(rows)} instants)"]
    for row in rows:
        done = row["completion_time"] or "-"
        flag = {True: "visible", False: "not visible", None: ""}[row["visible"]]  # type: ignore[index]
        lines.append(f"  {row['time']}  {row['action']:<12} {row['state']:<10} {done:<17} {flag}")
    return "\n".join(lines)


def cmd_timeline(args: argparse.Namespace) -> int:
    table = TableTimelines.open(args.path)
    kinds = [TimelineKind(args.which)] if args.which else list(TimelineKind)
    if args.json:
        print(json.dumps({k.value: _instant_json(table, k) for k in kinds}, indent=2))
    else:
        print("\n".join(format_timeline(table, k) for k in kinds))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    undo = rollback(TableTimelines.open(args.path), args.instant)
    print(
        json.dumps({"rolled_back": args.instant, "rollback": undo})
        if args.json
        else f"rolled back {args.instant} as rollback instant {undo}"
    )
    return 0


def _client_call(args: argparse.Namespace, what: str) -> object:
    return getattr(WriteClient.open(args.path), what)


def cmd_savepoint(args: argparse.Namespace) -> int:
    if args.delete:
        undo = _client_call(args, "delete_savepoint")(args.instant)  # type: ignore[operator]
        print(
            json.dumps({"deleted_savepoint_of": args.instant, "rollback": undo})
            if args.json
            else f"deleted the savepoint of {args.instant} as rollback instant {undo}"
        )
        return 0
    mark = _client_call(args, "savepoint")(args.instant)  # type: ignore[operator]
    print(
        json.dumps({"savepoint": mark, "target": args.instant})
        if args.json
        else f"savepointed {args.instant} as {mark}"
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    undo = _client_call(args, "restore")(args.instant)  # type: ignore[operator]
    print(
        json.dumps({"restore": undo, "target": args.instant})
        if args.json
        else f"restored to {args.instant} as {undo}"
    )
    return 0


def _service(args: argparse.Namespace, method: str, key: str, verb: str, idle: str) -> int:
    """Run a table service taking no argument; print its instant (or that it had no work)."""
    done = _client_call(args, method)()  # type: ignore[operator]
    print(json.dumps({key: done}) if args.json else (f"{verb} as {done}" if done else idle))
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    method = "compact" if args.data else "compact_metadata"
    return _service(args, method, "compaction", "compacted", "nothing to compact")


def cmd_recover(args: argparse.Namespace) -> int:
    done = _client_call(args, "recover")()  # type: ignore[operator]
    text = f"settled {', '.join(done)}" if done else "nothing to recover"  # type: ignore[arg-type]
    print(json.dumps({"recovered": done}) if args.json else text)
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    return _service(args, "clean", "clean", "cleaned", "nothing to clean")


def cmd_archive(args: argparse.Namespace) -> int:
    if args.keep is not None and args.keep < 1:
        raise ConfigError(f"--keep {args.keep}: keep at least 1 instant active")
    done = WriteClient.open(args.path).archive(args.keep)
    if args.json:
        print(json.dumps({"archive": msgspec.to_builtins(done) if done else None}))
    elif done is None:
        print("nothing to archive")
    else:
        print(
            f"archived {done.instants} instants ({done.files} instant files) up to "
            f"{done.horizon}; archive version {done.version}"
        )
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    client = WriteClient.open(args.path)
    done = client.reindex(groups=args.groups)
    groups = client.metadata.read_point().group_counts["record_index"]
    print(
        json.dumps({"reindex": done, "groups": groups})
        if args.json
        else f"reindexed the record index into {groups} file groups as {done}"
    )
    return 0


def cmd_index_build(args: argparse.Namespace) -> int:
    client = WriteClient.open(args.path)
    if args.secondary is not None:
        done = client.create_index(args.secondary)
        text = f"built the secondary index of {args.secondary!r} as {done}"
        print(json.dumps({"index": done, "column": args.secondary}) if args.json else text)
        return 0
    columns = [c.strip() for c in args.column_stats.split(",") if c.strip()]
    done = client.create_index(columns, kind="column_stats")
    text = f"built the statistics of {', '.join(map(repr, columns))} as {done}"
    found = {"index": done, "kind": "column_stats", "columns": columns}
    print(json.dumps(found) if args.json else text)
    return 0


def cmd_index_drop(args: argparse.Namespace) -> int:
    done = WriteClient.open(args.path).drop_index(args.column, kind=args.kind)
    what = "secondary index" if args.kind == "secondary" else "statistics"
    text = f"dropped the {what} of {args.column!r} as {done}"
    found = {"index": done, "column": args.column, "kind": args.kind}
    print(json.dumps(found) if args.json else text)
    return 0


def cmd_index_list(args: argparse.Namespace) -> int:
    """Every kind as text; ``--json`` prints ``{column: instant}`` of one kind (secondary by
    default, as before column statistics could be built), or ``{kind: {...}}`` for all."""
    client = WriteClient.open(args.path)
    if args.json:
        print(json.dumps(client.indexes(as_of=args.as_of, kind=args.kind or "secondary")))
        return 0
    found = client.indexes(as_of=args.as_of, kind="all")
    for kind, indexes in found.items():
        if args.kind in (None, "all", kind):
            for column, built in sorted(indexes.items()):
                print(f"{column}\t{kind}\tbuilt {built}")
    return 0


def _index_commands(sub: Any) -> None:
    text = "build, drop or list a table's indexes: secondary, column statistics (writers go on)"
    group = sub.add_parser("index", help=text, description=text)
    inner = group.add_subparsers(
        dest="index_command", required=True, metavar="ACTION", help="build, drop or list"
    )
    build = _command(inner, "build", "build an index on a live table", cmd_index_build)
    which = build.add_mutually_exclusive_group(required=True)
    which.add_argument("--secondary", metavar="COLUMN", help="a secondary index of a column")
    which.add_argument(
        "--column-stats",
        dest="column_stats",
        metavar="A,B",
        help="statistics of more columns (comma-separated), which reads then prune by",
    )
    drop = _command(inner, "drop", "drop an index", cmd_index_drop)
    drop.add_argument("column", help="the indexed column")
    drop.add_argument("--kind", choices=["secondary", "column_stats"], default="secondary")
    listed = _command(inner, "list", "the indexes (built column statistics too)", cmd_index_list)
    listed.add_argument("--as-of", dest="as_of", help=AS_OF_HELP)
    listed.add_argument(
        "--kind",
        choices=["secondary", "column_stats", "all"],
        help="one kind (default: all as text; --json: secondary)",
    )
    for cmd in inner.choices.values():
        cmd.add_argument("--json", action="store_true", help=JSON_HELP)


def cmd_validate(args: argparse.Namespace) -> int:
    problems = _client_call(args, "validate")()  # type: ignore[operator]
    if args.json:
        print(json.dumps({"problems": problems}))
    else:
        print("\n".join(problems) if problems else "the metadata table matches storage")
    return 1 if problems else 0


def cmd_lookup(args: argparse.Namespace) -> int:
    lookup = _client_call(args, "lookup")
    found = lookup(args.keys, as_of=args.as_of, partition=args.partition)  # type: ignore[operator]
    if args.json:
        print(json.dumps({k: msgspec.to_builtins(v) for k, v in found.items()}))
    else:
        for key, where in found.items():
            print(
                f"{key}\t{where.partition}\t{where.file_id}\t{where.instant}"
                if where
                else f"{key}\t(absent)"
            )
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    listing = _client_call(args, "files")(args.partition, as_of=args.as_of)  # type: ignore[operator]
    if args.json:
        print(json.dumps(listing))
    else:
        for partition, files in sorted(listing.items()):
            for name, size in sorted(files.items()):
                print(f"{partition}/{name}\t{size}")
    return 0


PATH_HELP = "the table's folder or URL (the one given to WriteClient.create)"
INSTANT_HELP = "a 17-digit instant time, as `lakebraid timeline PATH` lists them"
AS_OF_HELP = (
    "read as of this point: an instant time, or an ISO-8601 time such as "
    "2026-11-23T08:15:00Z (UTC unless an offset is given); default: now"
)
JSON_HELP = "print machine-readable JSON"


def _command(sub: Any, name: str, text: str, run: Any) -> argparse.ArgumentParser:
    cmd = sub.add_parser(name, help=text, description=text)
    cmd.add_argument("path", help=PATH_HELP)
    cmd.set_defaults(run=run)
    return cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakebraid", description=__doc__)
    parser.add_argument("--version", action="version", version=f"lakebraid {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tl = _command(sub, "timeline", "print the instants of a table's timelines", cmd_timeline)
    tl.add_argument(
        "--which", choices=[k.value for k in TimelineKind], help="one timeline (default: all)"
    )
    rb = _command(sub, "rollback", "undo a pending (dead) or completed commit", cmd_rollback)
    rb.add_argument("instant", help=INSTANT_HELP)
    lk = _command(sub, "lookup", "where keys live, from the record index", cmd_lookup)
    lk.add_argument("keys", nargs="+", help="record keys (as text; converted to the key type)")
    lk.add_argument("--as-of", dest="as_of", help=AS_OF_HELP)
    lk.add_argument(
        "--partition",
        help="the keys' partition path, such as day=2024-01-01 (tables whose record index is "
        "partition-scoped only)",
    )
    fl = _command(sub, "files", "data files, from the metadata table's files partition", cmd_files)
    fl.add_argument("--partition", help="one partition path, such as day=2024-01-01")
    fl.add_argument("--as-of", dest="as_of", help=AS_OF_HELP)
    ri = _command(
        sub,
        "reindex",
        "change the record index's file-group count (writers keep going)",
        cmd_reindex,
    )
    ri.add_argument(
        "--groups",
        type=int,
        help="file groups (default: estimated from the entry count and "
        "metadata.record_index.records.per.group)",
    )
    ar = _command(sub, "archive", "move old instants into the timeline archive now", cmd_archive)
    ar.add_argument(
        "--keep", type=int, help="global instants left active (default archive.min.instants)"
    )
    for name, run, needs_instant, text in (
        ("savepoint", cmd_savepoint, True, "keep a commit's files and make it a restore point"),
        ("restore", cmd_restore, True, "return the table to a savepointed commit"),
        ("compact", cmd_compact, False, "compact the metadata table (--data: the data's logs)"),
        ("clean", cmd_clean, False, "delete file slices beyond the retention"),
        ("recover", cmd_recover, False, "settle dead writers' instants and decided commits"),
        ("validate", cmd_validate, False, "compare the metadata table with storage"),
    ):
        cmd = _command(sub, name, text, run)
        if needs_instant:
            cmd.add_argument("instant", help=INSTANT_HELP)
    sub.choices["compact"].add_argument(
        "--data", action="store_true", help="fold merge-on-read data logs into new bases"
    )
    sub.choices["savepoint"].add_argument(
        "--delete", action="store_true", help="delete the commit's savepoint instead"
    )
    add_history_commands(sub, PATH_HELP)
    for cmd in sub.choices.values():
        cmd.add_argument("--json", action="store_true", help=JSON_HELP)
    _index_commands(sub)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("lakebraid")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:  # bars on a terminal only, after 2 s, never with --json (writers.cli.progress)
        with progress_bars(wanted(args.json)), progress.task(f"lakebraid {args.command}"):
            return args.run(args)
    except LakebraidError as exc:
        print(f"lakebraid {args.command}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not storage_failure(exc):
            raise  # a bug: its traceback is what a report needs
        print(
            f"lakebraid {args.command}: the storage failed ({type(exc).__name__}: {exc}); "
            "nothing committed is lost: a command cut off midway leaves a pending instant "
            "that recovery rolls back or finishes (WriteClient.recover(), or the next write "
            "once its heartbeat is stale); run the command again once the storage answers",
            file=sys.stderr,
        )
        return 1


STORAGE_MODULES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "fsspec")


def storage_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is the storage's: an ``OSError``
    or an error of the object-store client (an endpoint that does not answer, a dropped
    connection)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            return True
        if type(current).__module__.split(".")[0] in STORAGE_MODULES:
            return True
        current = current.__cause__ or current.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
