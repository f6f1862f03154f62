"""A soak run (issue 14): writer processes upsert and delete on one table for thousands of
commits with every inline service on; one is killed with SIGKILL at random and restarted; a
reader process checks that as-of reads of earlier instants answer what it saw then. At the
end the table must equal a model of the writes that returned success, ``validate()`` must be
clean, and files on disk must stay bounded by the retained commits, not by history (counted
once a killed writer's instant is recovered and the inline services ran again, as the next
write would: :func:`settle_dead_writers`).

Each writer owns its keys (``w<i>-<n>``), so the model is the union of per-writer models. A
writer journals each write's intent before making it and its outcome after; a restarted
writer settles the write it was killed in by reading the table: its keys show the state
before (not committed) or after (committed), anything else is a torn write and a failure.
Figures are printed (and written with ``--json``). Run from the repo root::

    .venv/bin/python benchmarks/soak.py --commits 3000 --kill-every 120   # the issue's run
    .venv/bin/python benchmarks/soak.py --commits 120 --kill-every 12     # the test's run
    .venv/bin/python benchmarks/soak.py --commits 1000 --writers 3 --table-type merge_on_read

On a merge-on-read table (``--table-type``) writes append logs, and a group is compacted
inline once it holds three, while the other writers go on appending to it.

A writer is killed every ``--kill-every`` seconds, and once half-way through the commits if
none was yet (a short run on a fast machine would otherwise kill none).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402

from lakebraid.timeline.as_of import AsOfError  # noqa: E402
from lakebraid.timeline.errors import RetryableError  # noqa: E402
from lakebraid.writers.client import WriteClient  # noqa: E402
from lakebraid.writers.errors import VanishedFileError  # noqa: E402
from lakebraid.writers.services.inline import run_inline  # noqa: E402

DAYS = 10
START_KEYS = 1000  # keys each writer inserts before the soak
OPTIONS = {"heartbeat.interval.ms": 200, "heartbeat.expiry.ms": 2000}
# merge-on-read: a group is compacted once it holds 3 logs, so compactions (inline, after the
# writes that reached the count) run every few commits, beside the other writer's appends
MERGE_ON_READ = {"compaction.max.log.files": 3}


def table_rows(keys: list[str], values: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": keys,
            "day": [f"2026-11-{1 + int(k.split('-')[1]) % DAYS:02d}" for k in keys],
            "ts": values,
            "v": values,
        }
    )


def state_of(client: WriteClient, prefix: str, as_of: str | None = None) -> dict[str, int]:
    table = client.read_arrow(as_of)
    ids, vs = table.column("id").to_pylist(), table.column("v").to_pylist()
    return {k: v for k, v in zip(ids, vs, strict=True) if k.startswith(prefix)}


# ---- a writer process -----------------------------------------------------------------
class Journal:
    """A writer's model of its keys, replayed from its journal (one JSON line per event)."""

    def __init__(self, path: Path) -> None:
        self.path, self.model, self.intent = path, {}, None
        self.seq = 0
        self.refused = 0  # writes that ended in a retryable conflict (their retries spent)
        if path.exists():
            for line in path.read_text().splitlines():
                self.apply(json.loads(line))

    def apply(self, event: dict) -> None:
        if "intent" in event:
            self.intent, self.seq = event, max(self.seq, event["intent"])
        elif event.get("done") is not None and self.intent is not None:
            for key, value in zip(self.intent["keys"], self.intent["values"], strict=True):
                if value is None:
                    self.model.pop(key, None)
                else:
                    self.model[key] = value
            self.intent = None
        elif "failed" in event:
            self.intent = None
            if not event.get("settled"):  # (a killed writer's write, settled on restart)
                self.refused += 1

    def log(self, event: dict) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(event) + "\n")
            out.flush()
            os.fsync(out.fileno())
        self.apply(event)


def settle(journal: Journal, client: WriteClient, prefix: str) -> None:
    """Decide the write a killed writer was in from what the table shows."""
    if journal.intent is None:
        return
    seen = state_of(client, prefix)
    after = dict(journal.model)
    for key, value in zip(journal.intent["keys"], journal.intent["values"], strict=True):
        if value is None:
            after.pop(key, None)
        else:
            after[key] = value
    if seen == after:
        journal.log({"done": journal.intent["intent"], "settled": True})
    elif seen == journal.model:
        journal.log({"failed": journal.intent["intent"], "settled": True})
    else:
        diff = sorted(k for k in set(seen) | set(after) if seen.get(k) != after.get(k))[:5]
        raise SystemExit(f"torn write {journal.intent['intent']}: keys {diff} match neither")


def writer(path: str, me: int, folder: Path, seed: int) -> None:
    rng = random.Random(seed)
    prefix = f"w{me}-"
    journal = Journal(folder / f"writer{me}.jsonl")
    client = WriteClient.open(path)
    settle(journal, client, prefix)
    next_key = max((int(k.split("-")[1]) for k in journal.model), default=START_KEYS) + 1
    while not (folder / "stop").exists():
        seq = journal.seq + 1
        live = sorted(journal.model)
        if rng.random() < 0.75 or len(live) < 50:
            old = rng.sample(live, min(40, len(live)))
            new = [f"{prefix}{n:06d}" for n in range(next_key, next_key + 10)]
            next_key += 10
            keys, values = old + new, [me * 10**8 + seq] * (len(old) + len(new))
        else:
            keys = rng.sample(live, 10)
            values = [None] * 10
        journal.log({"intent": seq, "keys": keys, "values": values})
        try:
            if values[0] is None:
                instant = client.delete(keys)
            else:
                instant = client.upsert(table_rows(keys, values))
            journal.log({"done": seq, "instant": instant})
        except RetryableError:
            journal.log({"failed": seq})


# ---- the reader process ---------------------------------------------------------------
def reader(path: str, folder: Path, seed: int) -> None:
    """Read as of the latest commit, and as of a random earlier one seen before; whatever
    happens, leave the counts (and an error) in ``reader.json``."""
    rng = random.Random(seed)
    counts: dict = {
        "checks": 0,
        "beyond_retention": 0,
        "vanished": 0,
        "mismatches": 0,
        "changed": [],
    }
    try:
        check_reads(WriteClient.open(path), folder, rng, counts)
    except Exception:
        counts["error"] = traceback.format_exc()[-3000:]
    (folder / "reader.json").write_text(json.dumps(counts))


def check_reads(client: WriteClient, folder: Path, rng: random.Random, counts: dict) -> None:
    seen: list[tuple[str, dict[str, int]]] = []
    while not (folder / "stop").exists():
        time.sleep(0.2)
        visible = [i.time for i in client.table.visibility().visible if i.action == "commit"]
        try:
            seen.append((visible[-1], state_of(client, "w", visible[-1])))
        except VanishedFileError:  # a clean passed it while it was read: retried next round
            counts["vanished"] += 1
            continue
        if len(seen) > 1:
            recent = seen[-9:-1] if rng.random() < 0.75 else seen[:-1]  # mostly retained ones
            instant, expected = rng.choice(recent)
            try:
                got = state_of(client, "w", instant)
            except AsOfError:
                counts["beyond_retention"] += 1
                seen = [s for s in seen if s[0] != instant]
                continue
            except VanishedFileError:
                counts["vanished"] += 1
                continue
            counts["checks"] += 1
            if got != expected:
                counts["mismatches"] += 1
                wrong = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
                counts["changed"].append(
                    {
                        "as_of": instant,
                        "latest": visible[-1],
                        "keys": len(wrong),
                        "then": {k: expected.get(k) for k in wrong[:5]},
                        "now": {k: got.get(k) for k in wrong[:5]},
                    }
                )


# ---- the driver -----------------------------------------------------------------------
def disk(path: str) -> dict[str, int]:
    parts: dict[str, int] = {}
    for root, _, names in os.walk(path):
        rel = os.path.relpath(root, path).split(os.sep)
        part = "/".join(rel[:2]) if rel[0] == ".braid" else "data"
        parts[part] = parts.get(part, 0) + len(names)
    parts["total"] = sum(parts.values())
    return parts


def spawn(role: str, *args: str) -> subprocess.Popen:
    """A writer or reader process; its stderr goes to ``<role><id>.err`` in the folder."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
    command = [sys.executable, __file__, "--role", role, *args]
    err = open(Path(args[2]) / f"{role}{args[1]}.err", "a")
    return subprocess.Popen(command, env=env, stderr=err, text=True)


def tail(folder: Path, role: str, who: int) -> str:
    path = folder / f"{role}{who}.err"
    return path.read_text()[-2000:] if path.exists() else ""


def commits(client: WriteClient) -> int:
    return sum(1 for i in client.table.visibility().visible if i.action == "commit")


def operations(client: WriteClient) -> dict[str, int]:
    """The completed instants of each operation (a commit's: upsert, delete, compaction) or
    action (a service's: clean, rollback), from the table's history."""
    counted: dict[str, int] = {}
    for done in client.history():
        name = str(done.get("operation") or done["action"])
        counted[name] = counted.get(name, 0) + 1
    return counted


def settle_dead_writers(path: str) -> None:
    """What the next write would do first and last, once the writers stopped: after a killed
    writer's heartbeat expired (``OPTIONS``), roll its pending instant back (recovery), then
    run the inline services once. Until then that instant holds archival back and every
    instant after it stays active, so the files counted at the end would depend on how many
    commits the run made in the seconds after its last kill (a fast machine: 50 instants
    beyond ``archive.max.instants``)."""
    time.sleep(OPTIONS["heartbeat.expiry.ms"] / 1000 + 0.5)
    client = WriteClient.open(path)
    client.recover()
    run_inline(client.metadata)


def drive(args: argparse.Namespace, folder: Path) -> dict:
    path = str(folder / "t")
    options = OPTIONS | (MERGE_ON_READ if args.table_type == "merge_on_read" else {})
    client = WriteClient.create(path, "id", ["day"], "ts", table_type=args.table_type, **options)
    keys = [f"w{w}-{n:06d}" for w in range(args.writers) for n in range(START_KEYS)]
    client.bulk_insert(table_rows(keys, [0] * len(keys)))
    for w in range(args.writers):
        start = {f"w{w}-{n:06d}": 0 for n in range(START_KEYS)}
        Journal(folder / f"writer{w}.jsonl").log(
            {"intent": 0, "keys": list(start), "values": list(start.values())}
        )
        Journal(folder / f"writer{w}.jsonl").log({"done": 0})
    rng = random.Random(args.seed)
    writers = {
        w: spawn("writer", path, str(w), str(folder), str(rng.random()))
        for w in range(args.writers)
    }
    reading = spawn("reader", path, "0", str(folder), str(args.seed))
    started = last_kill = time.monotonic()
    kills, marks, failures = 0, [], []
    while (done := commits(client)) < args.commits:
        time.sleep(1)
        for w, proc in writers.items():
            if proc.poll() is not None:
                failures.append(f"writer {w} exited {proc.returncode}: {tail(folder, 'writer', w)}")
        if failures:
            break
        # every --kill-every seconds, and once half-way in a run too short for that
        halfway = not kills and done >= args.commits // 2
        if halfway or time.monotonic() - last_kill > args.kill_every:
            w = rng.randrange(args.writers)
            time.sleep(rng.random() * 2)
            writers[w].send_signal(signal.SIGKILL)
            writers[w].wait()
            kills, last_kill = kills + 1, time.monotonic()
            writers[w] = spawn("writer", path, str(w), str(folder), str(rng.random()))
        if not marks or done >= marks[-1]["commits"] + args.commits // 10:
            marks.append(
                {
                    "commits": done,
                    "seconds": round(time.monotonic() - started),
                    "files": disk(path)["total"],
                }
            )
            print(
                f"[{marks[-1]['seconds']} s] {done} commits, {kills} kills, "
                f"{marks[-1]['files']} files",
                flush=True,
            )
    (folder / "stop").touch()
    for w, proc in writers.items():
        if proc.wait(timeout=600) != 0:
            failures.append(f"writer {w} exited {proc.returncode}: {tail(folder, 'writer', w)}")
    reading.wait(timeout=600)
    settle_dead_writers(path)
    final = WriteClient.open(path)
    model: dict[str, int] = {}
    refused = 0
    for w in range(args.writers):
        journal = Journal(folder / f"writer{w}.jsonl")
        try:
            settle(journal, final, f"w{w}-")
        except SystemExit as exc:
            failures.append(str(exc))
        model.update(journal.model)
        refused += journal.refused
    got = state_of(final, "w")
    if got != model:
        wrong = sorted(k for k in set(got) | set(model) if got.get(k) != model.get(k))
        failures.append(f"table differs from the model on {len(wrong)} keys, e.g. {wrong[:5]}")
    problems = final.validate()
    failures += [f"validate: {p}" for p in problems[:10]]
    read_counts = json.loads((folder / "reader.json").read_text())
    if "error" in read_counts:
        failures.append(f"the reader failed: {read_counts['error']}")
    if read_counts["mismatches"]:
        failures.append(
            f"{read_counts['mismatches']} as-of reads changed: {read_counts['changed']}"
        )
    return {
        "commits": commits(final),
        "instants": len(final.timeline()),
        "operations": operations(final),
        "writes_refused": refused,
        "kills": kills,
        "seconds": round(time.monotonic() - started),
        "reader": read_counts,
        "files_over_time": marks,
        "files_at_end": disk(path),
        "rows": len(got),
        "failures": failures,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--role", default="driver", choices=["driver", "writer", "reader"])
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument(
        "--kill-every", type=float, default=120.0, help="seconds (and a first kill half-way)"
    )
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--table-type", default="copy_on_write", choices=["copy_on_write", "merge_on_read"]
    )
    parser.add_argument("--dir", default=None, help="parent folder of the temporary table")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args(argv)
    if args.role == "writer":
        path, me, folder, seed = args.rest
        writer(path, int(me), Path(folder), int(float(seed) * 10**9))
        return 0
    if args.role == "reader":
        path, _, folder, seed = args.rest
        reader(path, Path(folder), int(seed))
        return 0
    folder = tempfile.mkdtemp(dir=args.dir)
    result = drive(args, Path(folder))
    if result["failures"]:
        result["kept"] = folder  # for a look at the table, the journals and the logs
    else:
        shutil.rmtree(folder)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
