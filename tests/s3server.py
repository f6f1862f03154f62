"""A real S3-protocol HTTP server on loopback for the tests: moto's server mode (it enforces
``If-None-Match`` and ``If-Match`` with 412), one per test process, a fresh bucket per table.

The standard AWS environment variables point at it (endpoint, fake credentials, region), so
subprocesses and Spark workers started by a test reach it as a user's code reaches S3.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = {
    "AWS_ACCESS_KEY_ID": "lakebraid-test",
    "AWS_SECRET_ACCESS_KEY": "lakebraid-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def s3_server(log_dir: Path) -> Iterator[str]:
    """Start moto's S3 server on a free loopback port; yield its endpoint URL; stop it."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = open(log_dir / f"moto-{port}.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start (log {log.name})") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def environment(endpoint: str) -> dict[str, str]:
    """The AWS environment variables that point S3 clients at ``endpoint``."""
    return {**ENV, "AWS_ENDPOINT_URL": endpoint}


def new_bucket(endpoint: str) -> str:
    """Create a bucket with a fresh name on the server; return its name."""
    import boto3

    name = f"lb-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"],
        region_name=ENV["AWS_DEFAULT_REGION"],
    )
    client.create_bucket(Bucket=name)
    return name


def apply_environment(endpoint: str) -> None:
    os.environ.update(environment(endpoint))
