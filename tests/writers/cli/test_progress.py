"""Progress of long work: silent by default, told to a reporter the caller sets (counts against
the work the test made), drawn by the CLI only on a terminal and never with ``--json``."""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pytest
from rich.progress import Progress

from lakebraid.timeline import progress
from lakebraid.writers.cli import progress as cli_progress
from lakebraid.writers.cli.main import main
from lakebraid.writers.client import WriteClient


class Recorder:
    """A reporter that keeps every task: label -> [total, advanced, finished]."""

    def __init__(self) -> None:
        self.tasks: dict[str, list] = {}
        self.lock = threading.Lock()

    def start(self, label: str, total: int | None) -> object:
        self.tasks[label] = [total, 0, False]
        return label

    def advance(self, handle: object, n: int) -> None:
        with self.lock:  # worker threads advance too
            self.tasks[handle][1] += n  # type: ignore[index]

    def finish(self, handle: object) -> None:
        self.tasks[handle][2] = True  # type: ignore[index]


def rows(ids: list[str], ts: int = 1) -> pa.Table:
    days = [f"d{i % 4}" for i in range(len(ids))]
    return pa.table({"id": ids, "day": days, "ts": [ts] * len(ids)})


def test_long_operations_report_their_steps_to_the_reporter_set(tmp_path, capsys):
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    seen = Recorder()
    with progress.reporting(seen):
        t1 = c.bulk_insert(rows([f"k{i}" for i in range(40)]))
    groups = sum(len(files) for files in c.files().values())  # a new group per partition
    assert seen.tasks["write data files"] == [groups, groups, True]
    assert seen.tasks["write metadata log blocks"][2] is True
    t2 = c.upsert(rows([f"k{i}" for i in range(0, 40, 5)], ts=2))  # no reporter: silent
    assert "write data files" in seen.tasks and len(seen.tasks) == 2
    with progress.reporting(seen):
        assert c.validate() == []
    files = len(c.file_paths())
    assert seen.tasks["validate data files"] == [files, files, True]
    c.savepoint(t1)
    with progress.reporting(seen):
        c.restore(t1)
    total, done, finished = seen.tasks["delete undone files"]
    assert total == done and finished and total >= 1  # the upsert's files and logs
    assert t2 not in {f.rsplit("_", 1)[-1][:17] for p in c.files().values() for f in p}
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # library code prints nothing


def test_the_cli_draws_only_on_a_terminal_and_never_with_json(tmp_path, capsys, monkeypatch):
    assert cli_progress.wanted(json_output=False) is False  # pytest's capture is no terminal
    monkeypatch.setattr("sys.stdout.isatty", lambda: True, raising=False)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert cli_progress.wanted(json_output=True) is False
    assert cli_progress.wanted(json_output=False) is True
    monkeypatch.undo()
    c = WriteClient.create(str(tmp_path / "t"), "id", ["day"], "ts")
    c.insert(rows(["a", "b"]))
    assert main(["validate", c.path, "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == {"problems": []} and out.err == ""


def test_the_rich_reporter_keeps_a_task_per_step_and_removes_it_when_done():
    display = Progress(auto_refresh=False, disable=True)
    reporter = cli_progress.RichReporter(display)
    with progress.reporting(reporter), progress.task("work", total=3) as bar:
        bar.advance(2)
        (task,) = display.tasks
        assert (task.description, task.total, task.completed) == ("work", 3, 2)
    assert display.tasks == []


@pytest.mark.parametrize("elapsed, shown", [(0.5, False), (cli_progress.DELAY + 0.1, True)])
def test_a_task_is_drawn_only_after_the_delay(monkeypatch, elapsed, shown):
    display = cli_progress._Delayed(auto_refresh=False, disable=True)
    task_id = display.add_task("slow", total=None)
    monkeypatch.setattr(type(display.tasks[0]), "elapsed", property(lambda self: elapsed))
    table = next(iter(display.get_renderables()))
    assert (table.row_count == 1) is shown
    display.remove_task(task_id)
