"""The write client on a real Spark standalone cluster on loopback: a master and two workers
started from the installed pyspark, a driver in its own process (``cluster_driver.py``), every
Spark DataFrame write on the Spark-native pipeline, so every step of it runs in executor JVMs
and their Python workers, which share nothing with the driver but the file system.

The driver reports rows read, key lookups, validation problems and where its tasks ran; the
test compares them with a model built here from the input alone.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark
import pytest
from s3server import environment

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[4]
DRIVER = Path(__file__).with_name("cluster_driver.py")
SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The daemons' web UIs cannot be turned off: they bind port 0 on loopback.
DAEMON_CONF = {
    "spark.master.rest.enabled": "false",  # its default port 6066 is fixed: no collisions
    "spark.port.maxRetries": "0",  # the master binds the port we chose, or fails
}
WAIT_S = 120.0  # for each line awaited in a log
DRIVER_S = 300.0
STOP_S = 15.0
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
WORKERS = ["worker1", "worker2"]
TABLE = "table"  # relative: executors run elsewhere, so the client must make it absolute


# ---- processes -------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process that is not a zombie."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            text = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:  # gone meanwhile
            continue
        if text:
            state, ppid, pgrp = text.rsplit(")", 1)[1].split()[:3]
            if state != "Z":
                found[int(entry.name)] = (int(ppid), int(pgrp))
    return found


def ours(groups: set[int]) -> set[int]:
    """Live members of ``groups`` and everything below them. PySpark's Python daemons leave
    their parent's process group (``os.setpgid``), so groups alone would miss them."""
    table = processes()
    found = {pid for pid, (_, pgrp) in table.items() if pgrp in groups or pid in groups}
    while below := {pid for pid, (ppid, _) in table.items() if ppid in found} - found:
        found |= below
    return found


def stop(procs: list[subprocess.Popen]) -> None:
    """Stop processes we started (each leads its own process group) and all they started,
    by pid; SIGKILL what is left after ``STOP_S``."""
    groups = {p.pid for p in procs}
    pids = ours(groups)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_S
        while pids and time.monotonic() < deadline:
            for p in procs:
                p.poll()  # reap our own children, or they linger as zombies
            pids &= set(processes())
            time.sleep(0.2)
        if not pids:
            return
    raise RuntimeError(f"processes {sorted(pids)} survived SIGKILL")


# ---- the cluster -----------------------------------------------------------------------------
@dataclass
class Cluster:
    """Every process the test starts, by name (its output in ``<base>/<name>.log``)."""

    url: str
    base: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def launch(self, name: str, args: list[str], stdout: Path | None = None) -> None:
        log = self.base / f"{name}.log"
        with log.open("wb") as err, open(stdout or os.devnull, "wb") as out:
            self.procs[name] = subprocess.Popen(
                args,
                stdout=out if stdout else err,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.base,
                start_new_session=True,  # its own process group, which stop() ends
            )

    def wait_for(self, name: str, line: str) -> None:
        """Until ``line`` is in the log of ``name``; fails early when a process exits (the
        driver: with an error)."""
        deadline = time.monotonic() + WAIT_S
        while line not in (self.base / f"{name}.log").read_text():
            failed = [n for n, p in self.procs.items() if p.poll() not in (None, 0)]
            failed += [n for n, p in self.procs.items() if n != "driver" and p.poll() == 0]
            if failed or time.monotonic() > deadline:
                logs = {f.name: f.read_text()[-3000:] for f in sorted(self.base.glob("*.log"))}
                pytest.fail(f"no {line!r} from {name} (exited: {failed}); logs: {logs}")
            time.sleep(0.1)

    def start_workers(self) -> None:
        """Once the master is ALIVE: it drops registrations that come earlier, and a worker
        retries only 5-15 s later."""
        for name in WORKERS:
            self.launch(
                name,
                spark_class(
                    "worker.Worker",
                    *("--port", "0", "--webui-port", "0", "--cores", "1", "--memory", "1g"),
                    *("--work-dir", str(self.base / name), self.url),
                ),
            )


def spark_class(main: str, *args: str) -> list[str]:
    """A standalone daemon of the installed pyspark, bound to loopback."""
    return [str(SPARK_CLASS), f"org.apache.spark.deploy.{main}", "--host", "127.0.0.1", *args]


def spark_env(base: Path) -> dict[str, str]:
    conf = base / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in DAEMON_CONF.items()))
    (base / "local").mkdir()
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(base / "local"),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO),
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A master, starting; the test adds the workers and the driver. Every process is stopped
    at the end (with all it started), whatever happens."""
    port = free_port()
    made = Cluster(f"spark://127.0.0.1:{port}", tmp_path, spark_env(tmp_path))
    try:
        made.launch(
            "master", spark_class("master.Master", "--port", str(port), "--webui-port", "0")
        )
        yield made
    finally:
        stop(list(made.procs.values()))


def drive(cluster: Cluster, paths: list[str]) -> dict[str, Any]:
    """Run the driver, its JVM starting while the cluster comes up; its JSON report. ``paths``:
    the tables it writes in turn (relative to the driver's cwd, or ``s3://`` URLs)."""
    base = cluster.base / "driver"
    base.mkdir()
    spec, ready, out = base / "spec.json", base / "ready", base / "stdout.txt"
    spec.write_text(json.dumps({**SPEC, "paths": paths}))
    args = [sys.executable, str(DRIVER), cluster.url, str(spec), str(ready)]
    cluster.launch("driver", args, stdout=out)
    cluster.wait_for("master", "New state: ALIVE")
    cluster.start_workers()
    ready.touch()
    for name in WORKERS:
        cluster.wait_for(name, "Successfully registered with master")
    driver = cluster.procs["driver"]
    try:
        driver.wait(timeout=DRIVER_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the driver ran over {DRIVER_S} s; see {cluster.base}/*.log")
    assert driver.returncode == 0, (cluster.base / "driver.log").read_text()[-5000:]
    result = json.loads(out.read_text().strip().splitlines()[-1])  # its last line
    assert [table["path"] for table in result["tables"]] == paths
    for table in result["tables"]:  # TABLE is relative to the driver's cwd
        table["table"] = str(cluster.base / TABLE) if table["path"] == TABLE else table["path"]
    return result


# ---- the model -------------------------------------------------------------------------------
def row(key: int, day: int, ts: int, amount: float) -> dict[str, Any]:
    return {"id": f"k{key:02d}", "day": DAYS[day], "ts": ts, "amount": amount}


SPEC: dict[str, Any] = {
    "insert": [row(i, i % 3, 1, float(i)) for i in range(12)],
    "upsert": [
        row(0, 0, 2, 100.0),  # update in place
        row(1, 1, 3, 101.0),  # two rows of one key: the highest ts wins, whatever the
        row(1, 1, 2, -1.0),  # order (rows of a multi-partition frame have none)
        row(3, 0, 1, 103.0),
        row(3, 0, 4, 203.0),
        row(5, 0, 2, 105.0),  # k05 moves from day 3 to day 1
        *(row(i, i % 3, 2, float(i)) for i in range(12, 16)),  # new keys
    ],
    "delete": ["k02", "k07", "k13", "never-written"],
    "upsert_undone": [row(0, 2, 5, 0.0), row(20, 1, 5, 20.0), row(6, 1, 5, 6.0)],
    "keys": [f"k{i:02d}" for i in range(21)] + ["never-written"],
}


def upserted(model: dict[str, dict], rows: list[dict[str, Any]]) -> dict[str, dict]:
    best: dict[str, tuple[int, int, dict]] = {}
    for seq, r in enumerate(rows):
        if r["id"] not in best or (r["ts"], seq) > best[r["id"]][:2]:
            best[r["id"]] = (r["ts"], seq, r)
    return {**model, **{k: dict(r) for k, (_, _, r) in best.items()}}


def expected_states() -> dict[str, dict[str, dict]]:
    inserted = upserted({}, SPEC["insert"])
    updated = upserted(inserted, SPEC["upsert"])
    deleted = {k: v for k, v in updated.items() if k not in SPEC["delete"]}
    return {
        "insert": inserted,
        "upsert": updated,
        "delete": deleted,
        "upsert_undone": upserted(deleted, SPEC["upsert_undone"]),
        "rollback": deleted,
    }


def location_of(url: str) -> tuple[str, str]:
    """(partition folder, file id) of a data file ``<file id>_<token>_<instant>.parquet``."""
    path = Path(url.removeprefix("file://"))
    return path.parent.name, path.name.split("_")[0]


def check_state(seen: dict[str, Any], model: dict[str, dict], table: Path) -> None:
    rows = seen["rows"]
    assert sorted(r["id"] for r in rows) == sorted(model), "keys read differ from the model"
    holder: dict[str, tuple[str, str]] = {}
    for r in rows:
        assert {k: r[k] for k in ("id", "day", "ts", "amount")} == model[r["id"]]
        folder, fid = location_of(r["file"])
        assert folder == f"day={r['day']}", r
        assert Path(r["file"].removeprefix("file://")).parent.parent == Path(table), r["file"]
        holder[r["id"]] = (folder, fid)
    for key, location in seen["lookup"].items():
        assert location == (list(holder[key]) if key in model else None), key


# ---- the test --------------------------------------------------------------------------------
def check_cluster_use(cluster: Cluster, report: dict[str, Any]) -> None:
    assert report["master"] == cluster.url
    assert len(report["executors"]) == 3, report["executors"]  # the driver and two executors
    workers = {cluster.procs[name].pid for name in WORKERS}
    below = set()
    for chain in report["tasks"]:
        assert report["driver_pid"] not in chain and report["driver_jvm_pid"] not in chain
        assert len(workers & set(chain)) == 1, (chain, workers)
        below |= workers & set(chain)
    assert below == workers, "both workers' executors must have run tasks"
    for name in WORKERS:
        (stderr,) = (cluster.base / name).glob("app-*/*/stderr")
        command = stderr.read_text().split("\n", 1)[0]
        assert command.startswith("Spark Executor Command:")
        assert '"--hostname" "127.0.0.1"' in command
        assert "CoarseGrainedScheduler@127.0.0.1:" in command
        assert "-Xmx512M" in command


def check_steps(report: dict[str, Any]) -> None:
    states = expected_states()
    assert list(report["steps"]) == list(states)
    table = Path(report["table"])
    for step, model in states.items():
        seen = report["steps"][step]
        check_state(seen, model, table)
        assert seen["problems"] == [], (step, seen["problems"])
    assert report["steps"]["insert"]["lookup"]["k05"][0] == "day=2024-01-03"
    assert report["steps"]["upsert"]["lookup"]["k05"][0] == "day=2024-01-01"
    actions = [(action, state) for action, state, _ in report["timeline"]]
    assert actions == [("commit", "completed")] * 4 + [("rollback", "completed")]
    for step in ("insert", "upsert"):  # as of an earlier write: the table right after it
        check_state(report["as_of"][step], states[step], table)
        assert report["as_of"][step]["lookup"] == report["steps"][step]["lookup"]


def test_writes_on_a_standalone_cluster_match_the_model(
    cluster: Cluster, s3_url, s3_endpoint
) -> None:
    """One driver writes a table on local disk, then one on S3 (a loopback server; the workers
    inherit its AWS environment, set before they start: executors write data files straight
    to the store and read them back through fsspec). One cluster for both: starting it costs
    more than either table."""
    cluster.env.update(environment(s3_endpoint))
    paths = [TABLE, s3_url()]
    report = drive(cluster, paths)
    check_cluster_use(cluster, report)
    for table in report["tables"]:
        check_steps(table)
