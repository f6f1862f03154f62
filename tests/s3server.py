"""The tests' S3 server under the names they use: moto's S3 server on loopback (it enforces
``If-None-Match`` and ``If-Match`` with 412) behind the counting, fault-injecting proxy of
:mod:`lakebraid.writers.cli.loopback_s3`, one per test process, a fresh bucket per table.

The standard AWS environment variables point at the proxy (endpoint, fake credentials, region),
so subprocesses and Spark workers started by a test reach it as a user's code reaches S3.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakebraid.writers.cli.loopback_s3 import CREDENTIALS, LoopbackS3, create_bucket

ENV = CREDENTIALS


@contextmanager
def s3_server(log_dir: Path) -> Iterator[str]:
    """Start moto and its proxy on free loopback ports; yield the proxy's endpoint URL; stop."""
    with LoopbackS3(log_dir) as server:
        yield server.endpoint


def environment(endpoint: str) -> dict[str, str]:
    """The AWS environment variables that point S3 clients at ``endpoint``."""
    return {**ENV, "AWS_ENDPOINT_URL": endpoint}


def new_bucket(endpoint: str) -> str:
    """Create a bucket with a fresh name on the server at ``endpoint``; return its name."""
    return create_bucket(endpoint)


def apply_environment(endpoint: str) -> None:
    os.environ.update(environment(endpoint))
