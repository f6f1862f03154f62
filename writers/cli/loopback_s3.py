"""A real S3-protocol server on loopback for tests, benchmarks and the demo.

:class:`LoopbackS3` starts moto's S3 server (it enforces ``If-None-Match`` and ``If-Match``
with 412, as S3 does) on a free loopback port and, in front of it, a threaded HTTP/1.1 proxy
that clients talk to. The proxy forwards each request byte for byte (method, path and query,
headers, body with its chunked framing) and streams the reply back; on the way it counts
requests by kind (LIST, HEAD, GET, PUT, DELETE with multi-object deletes, POST) and injects
faults at a seeded random rate: ``503`` SlowDown and ``500`` InternalError answered without
forwarding, ``reset`` (connection reset, not forwarded) and ``lost`` (forwarded, so the server
acts on it, then the connection is reset before the reply); not on moto's own ``/moto-api``.
A test may also set :attr:`LoopbackS3.rule` to fail chosen requests (the proxy itself is in
``loopback_proxy``).
Buckets are addressed path-style, as S3 clients do for an IP endpoint.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import boto3

from lakebraid.writers.cli.loopback_proxy import (  # noqa: F401 (re-exported)
    ERRORS,
    ProxyServer,
    request_kind,
)

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "lakebraid-test",
    "AWS_SECRET_ACCESS_KEY": "lakebraid-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}
FAULT_KINDS = ("503", "500", "reset", "lost")


def create_bucket(endpoint: str, name: str | None = None) -> str:
    """Create a bucket (a fresh name unless given) on the server at ``endpoint``."""
    name = name or f"lb-{uuid.uuid4().hex[:12]}"
    key, secret, region = CREDENTIALS.values()
    client = boto3.Session(key, secret, region_name=region).client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=name)
    return name


class Counting:
    """The requests of one :meth:`LoopbackS3.counting` block by kind, fixed when it ends."""

    def __init__(self, owner: LoopbackS3) -> None:
        self._owner = owner
        self._before = owner.counts()
        self._final: Counter[str] | None = None

    @property
    def counts(self) -> Counter[str]:
        """Kind -> requests (kinds with none are absent; a Counter answers 0 for them)."""
        if self._final is not None:
            return Counter(self._final)
        return +(self._owner.counts() - self._before)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class LoopbackS3:
    """moto's S3 server behind a counting, fault-injecting proxy at :attr:`endpoint`."""

    def __init__(self, log_dir: Path | str | None = None) -> None:
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._proxy: ProxyServer | None = None
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._rate = 0.0
        self._kinds: tuple[str, ...] = FAULT_KINDS
        self._random = random.Random(0)
        self._left: int | None = None
        # a test's own fault rule: (kind, path and query, body) -> fault or None; called
        # under the proxy's lock, in the order requests arrive
        self.rule: Callable[[str, str, bytes], str | None] | None = None
        self.endpoint = self.server_endpoint = ""  # the proxy's URL; moto's
        self.log_path: Path | None = None

    def __enter__(self) -> LoopbackS3:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> LoopbackS3:
        """Start moto and the proxy; wait until moto answers."""
        if self._log_dir is None:
            self._temp = tempfile.TemporaryDirectory(prefix="loopback-s3-")
            self._log_dir = Path(self._temp.name)
        with socket.socket() as probe:  # a free port, for moto to bind
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        self.server_endpoint = f"http://127.0.0.1:{port}"
        self.log_path = self._log_dir / f"moto-{port}.log"
        with open(self.log_path, "wb") as log:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 30
            while not self._server_answers():
                if self._server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start (log {self.log_path})")
                time.sleep(0.1)
            self._proxy = ProxyServer(self, ("127.0.0.1", port))
        except BaseException:
            self.close()
            raise
        self.endpoint = f"http://127.0.0.1:{self._proxy.server_address[1]}"
        threading.Thread(
            target=self._proxy.serve_forever, args=(0.05,), name="loopback-s3", daemon=True
        ).start()
        return self

    def _server_answers(self) -> bool:
        with suppress(OSError):
            urllib.request.urlopen(f"{self.server_endpoint}/moto-api/", timeout=1).close()
            return True
        return False

    def close(self) -> None:
        """Stop the proxy (dropping its open connections) and moto."""
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
            for sock in list(self._proxy.open_connections):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._proxy = None
        if self._server is not None:
            self._server.terminate()
            self._server.wait(timeout=10)
            self._server = None
        if self._temp is not None:
            self._temp.cleanup()
            self._temp = None

    def environment(self) -> dict[str, str]:
        """The AWS environment variables that point S3 clients at the proxy."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def storage_options(self) -> dict[str, Any]:
        """Options for ``s3fs.S3FileSystem`` (and fsspec URLs) that reach the proxy."""
        return {
            "endpoint_url": self.endpoint,
            "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "client_kwargs": {"region_name": CREDENTIALS["AWS_DEFAULT_REGION"]},
        }

    def new_bucket(self, name: str | None = None) -> str:
        """Create a bucket on moto directly (not counted, never faulted); return its name."""
        return create_bucket(self.server_endpoint, name)

    def counts(self) -> Counter[str]:
        """Requests through the proxy by kind since the start or :meth:`reset_counts`."""
        with self._lock:
            return Counter(self._counts)

    def faults(self) -> Counter[str]:
        """Injected faults by kind (``503``, ``500``, ``reset``, ``lost``), same period."""
        with self._lock:
            return Counter(self._faults)

    def reset_counts(self) -> None:
        """Zero the request and fault counts."""
        with self._lock:
            self._counts.clear()
            self._faults.clear()

    @contextmanager
    def counting(self) -> Iterator[Counting]:
        """``with lb.counting() as c:`` ... ``c.counts``: the requests made in the block."""
        counting = Counting(self)
        try:
            yield counting
        finally:
            counting._final = counting.counts

    def inject(
        self,
        rate: float,
        seed: int = 0,
        kinds: Sequence[str] = FAULT_KINDS,
        limit: int | None = None,
    ) -> None:
        """Fail ``rate`` of the requests from now on (0 stops), each with a kind drawn from
        ``kinds`` by a random generator seeded with ``seed``; at most ``limit`` faults."""
        if not kinds or set(kinds) - set(FAULT_KINDS):
            raise ValueError(f"fault kinds must be some of {FAULT_KINDS}, not {list(kinds)}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], not {rate}")
        with self._lock:
            self._rate = float(rate)
            self._kinds = tuple(kinds)
            self._random = random.Random(seed)
            self._left = limit

    def observe(self, kind: str, target: str, body: bytes) -> str | None:
        """Count one request; return the fault to inject on it, if any: the :attr:`rule`'s,
        else one drawn at the :meth:`inject` rate."""
        with self._lock:
            self._counts[kind] += 1
            fault = self.rule(kind, target, body) if self.rule is not None else None
            if fault is not None:
                self._faults[fault] += 1
                return fault
            if self._rate <= 0.0 or self._left == 0 or self._random.random() >= self._rate:
                return None
            if self._left is not None:
                self._left -= 1
            fault = self._random.choice(self._kinds)
            self._faults[fault] += 1
            return fault
