"""The ``lakebraid`` command line. Exit 0 on success; on failure a one-line reason, exit 1."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from timeline.errors import LakebraidError
from timeline.layout import TimelineKind
from timeline.table import TableTimelines


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakebraid", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    tl = sub.add_parser("timeline", help="print the instants of a table's timelines")
    tl.add_argument("path")
    tl.add_argument("--which", choices=[k.value for k in TimelineKind])
    tl.add_argument("--json", action="store_true", help="machine-readable output")
    tl.set_defaults(run=cmd_timeline)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except LakebraidError as exc:
        print(f"lakebraid {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
