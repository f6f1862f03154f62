"""Shared fixtures. Spark fixtures come in the write-client tests; timeline tests need none."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from table_fixtures import small_config

from lakebraid.timeline.table import TableTimelines

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def run_python():
    """Start ``python -c code`` in a new process with the repo importable."""

    def start(code: str, *args: str, **kwargs) -> subprocess.Popen:
        # faulthandler: a process that dies of a signal (an abort in native code) prints
        # every thread's Python stack to its stderr, which the tests show when they fail
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}
        return subprocess.Popen(
            [sys.executable, "-c", code, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kwargs,
        )

    return start


@pytest.fixture
def beside_writer(run_python, monkeypatch, tmp_path):
    """``beside_writer(client, kind=..., columns=..., rows=...)``: an index build while a writer
    process commits (``build_fixtures.build_beside_writer``), in this test's folder."""
    from build_fixtures import build_beside_writer  # the write client: only these tests load it

    return partial(
        build_beside_writer, run_python=run_python, monkeypatch=monkeypatch, folder=tmp_path
    )


@pytest.fixture
def new_table(tmp_path):
    """``new_table(**options)`` creates a small partitioned table under tmp_path."""

    def make(name: str = "t", **options: object) -> TableTimelines:
        config = small_config(name)
        return TableTimelines.create(str(tmp_path / name), config, options)

    return make


@pytest.fixture(scope="session")
def spark():
    """One embedded Spark session per test process, tuned for tests (shared/spark-facts.md)."""
    from lakebraid.writers.engine.spark.session import embedded_session

    session = embedded_session(
        "lakebraid-tests",
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "2g",
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def loopback_s3(tmp_path_factory):
    """A moto S3 server on loopback behind the counting, fault-injecting proxy for this test
    process (``LoopbackS3``: ``.counting()``, ``.inject()``; a test that injects faults stops
    them before it ends); the AWS environment variables point at the proxy for the rest of
    the session (subprocesses inherit them)."""
    from s3server import apply_environment

    from lakebraid.writers.cli.loopback_s3 import LoopbackS3

    with LoopbackS3(tmp_path_factory.mktemp("moto")) as server:
        apply_environment(server.endpoint)
        yield server


@pytest.fixture(scope="session")
def s3_endpoint(loopback_s3):
    """The endpoint URL of the loopback S3 server (its proxy) for this test process."""
    return loopback_s3.endpoint


@pytest.fixture
def s3_rule(loopback_s3):
    """``s3_rule(rule)``: fail the requests ``rule(kind, path and query, body)`` names (it
    returns a fault: ``503``, ``500``, ``reset``, ``lost``; or None) until the test ends."""

    def install(rule):
        loopback_s3.rule = rule

    yield install
    loopback_s3.rule = None


@pytest.fixture
def s3_url(loopback_s3):
    """``s3_url(name)``: the URL of a table in a fresh bucket on the loopback S3 server."""

    def make(name: str = "t") -> str:
        return f"s3://{loopback_s3.new_bucket()}/{name}"

    return make
