"""A real S3-protocol server on loopback for tests, benchmarks and the demo.

:class:`LoopbackS3` starts moto's S3 server (``python -m moto.server``; it enforces
``If-None-Match`` and ``If-Match`` with 412, as S3 does) on a free loopback port and, in front
of it, a small threaded HTTP/1.1 proxy that clients talk to (``.endpoint``). The proxy forwards
each request byte for byte (method, path and query, headers, body, chunked framing included)
and streams the reply back, and on the way it

* counts requests by kind (``LIST``, ``HEAD``, ``GET``, ``PUT``, ``DELETE``, ``POST``; a
  multi-object delete ``POST ?delete`` counts as ``DELETE``): :meth:`LoopbackS3.counts`,
  :meth:`LoopbackS3.counting`;
* injects faults at a seeded random rate (:meth:`LoopbackS3.inject`): ``503`` (SlowDown) and
  ``500`` (InternalError) answered without forwarding, ``reset`` (the connection is reset
  without forwarding) and ``lost`` (forwarded, so the server acts on it, then the connection is
  reset before the reply: a PUT stored whose response never arrived).

Requests to moto's own ``/moto-api`` are neither counted nor faulted. Buckets are addressed
path-style (``/bucket/key``), which is what S3 clients use for an IP endpoint.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "lakebraid-test",
    "AWS_SECRET_ACCESS_KEY": "lakebraid-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}
KINDS = ("LIST", "HEAD", "GET", "PUT", "DELETE", "POST")
FAULT_KINDS = ("503", "500", "reset", "lost")
# Headers about one hop, not the message: never forwarded as they came. ``Expect`` is
# answered by the proxy itself (100 Continue) before it reads the body.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "upgrade", "expect", "trailer"}
)
ERRORS = {
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
}
PIECE = 1 << 16


def request_kind(method: str, target: str) -> str:
    """The kind a request counts as: ``LIST`` for a GET on a bucket (or on the service, or
    with a ListObjects query), ``DELETE`` for a multi-object delete, else its method."""
    url = urlsplit(target)
    query = parse_qs(url.query, keep_blank_values=True)
    key = url.path.lstrip("/").partition("/")[2]
    if method == "GET":
        return "LIST" if not key or "list-type" in query else "GET"
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method


def create_bucket(endpoint: str, name: str | None = None) -> str:
    """Create a bucket (a fresh name unless given) on the server at ``endpoint``."""
    name = name or f"lb-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
    )
    client.create_bucket(Bucket=name)
    return name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Counting:
    """The requests made inside one :meth:`LoopbackS3.counting` block, by kind: live while
    the block runs, fixed when it ends."""

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

    def _stop(self) -> None:
        self._final = self.counts


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not hold up close()

    def __init__(self, owner: LoopbackS3, upstream: tuple[str, int]) -> None:
        self.owner = owner
        self.upstream = upstream
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    def drop_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.open_connections)
        for sock in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def setup(self) -> None:
        super().setup()
        self.upstream = http.client.HTTPConnection(*self.server.upstream, timeout=300)
        with self.server.connections_lock:
            self.server.open_connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.open_connections.discard(self.connection)
        self.upstream.close()
        try:
            super().finish()
        except OSError:
            pass

    def handle(self) -> None:
        try:
            super().handle()
        except (OSError, http.client.HTTPException):
            self.close_connection = True  # the client or the server went away mid-reply

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests' output is not the place for an access log

    def do_GET(self) -> None:
        self._proxy()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    def _proxy(self) -> None:
        body = self._read_body()
        if body is None:
            self.close_connection = True
            return
        fault = None
        if not urlsplit(self.path).path.startswith("/moto-api"):
            fault = self.server.owner._observe(request_kind(self.command, self.path))
        if fault in ERRORS:
            self._answer_error(*ERRORS[fault])
            return
        if fault == "reset":
            self._reset()
            return
        try:
            reply = self._exchange(body)
        except (OSError, http.client.HTTPException) as error:
            self.upstream.close()
            self._answer_error(502, "BadGateway", f"loopback proxy: {error!r}")
            return
        if fault == "lost":
            reply.read()
            self._reset()
            return
        self._relay(reply)

    def _read_body(self) -> bytes | None:
        """The body as sent, chunked framing and trailers included (None: the client left)."""
        codings = self.headers.get("Transfer-Encoding", "")
        if codings.replace(" ", "").lower().endswith("chunked"):
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        return body if len(body) == length else None

    def _read_chunked(self) -> bytes | None:
        raw = bytearray()
        while True:
            line = self.rfile.readline(PIECE + 1)
            if not line.endswith(b"\n"):
                return None
            raw += line
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                break
            data = self.rfile.read(size + 2)
            if len(data) != size + 2:
                return None
            raw += data
        while True:  # trailer fields, then the empty line that ends the message
            line = self.rfile.readline(PIECE + 1)
            if not line.endswith(b"\n"):
                return None
            raw += line
            if line in (b"\r\n", b"\n"):
                return bytes(raw)

    def _exchange(self, body: bytes) -> http.client.HTTPResponse:
        """Send the request to moto and read its reply's head; a kept-alive connection moto
        closed meanwhile is reopened once."""
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        while True:
            fresh = self.upstream.sock is None
            try:
                self.upstream.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                for name, value in self.headers.items():
                    lower = name.lower()
                    if lower in HOP_BY_HOP or (chunked and lower == "content-length"):
                        continue
                    self.upstream.putheader(name, value)
                self.upstream.endheaders(body or None)
                return self.upstream.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.upstream.close()
                if fresh:
                    raise

    def _relay(self, reply: http.client.HTTPResponse) -> None:
        """Send moto's reply to the client: its head as it came, its body streamed with the
        framing it came with (a length, or chunks), or with a length if moto closed it."""
        self.send_response_only(reply.status, reply.reason)
        for name, value in reply.getheaders():
            if name.lower() not in HOP_BY_HOP and name.lower() != "transfer-encoding":
                self.send_header(name, value)
        bodiless = self.command == "HEAD" or reply.status in (204, 304) or reply.status < 200
        if bodiless:
            reply.read()
            self.end_headers()
        elif reply.chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while piece := reply.read1(PIECE):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif reply.length is not None:
            self.end_headers()
            while piece := reply.read1(PIECE):
                self.wfile.write(piece)
        else:
            data = reply.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        if reply.will_close:
            self.upstream.close()

    def _answer_error(self, status: int, code: str, message: str) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<RequestId>{request_id}</RequestId></Error>"
        ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", request_id)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self) -> None:
        """Close the client's connection abruptly: with SO_LINGER 0 the close sends a reset."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # drops the socket's last file reference, so close() is real
        self.connection.close()


class LoopbackS3:
    """moto's S3 server on loopback behind a counting, fault-injecting proxy (a context
    manager; ``start``/``close`` for longer lives). Clients use :attr:`endpoint`."""

    def __init__(self, log_dir: Path | str | None = None) -> None:
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._proxy: _ProxyServer | None = None
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._rate = 0.0
        self._kinds: tuple[str, ...] = FAULT_KINDS
        self._random = random.Random(0)
        self._left: int | None = None
        self.server_endpoint = ""
        self.endpoint = ""
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
        port = _free_port()
        self.server_endpoint = f"http://127.0.0.1:{port}"
        self.log_path = self._log_dir / f"moto-{port}.log"
        with open(self.log_path, "wb") as log:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_for_server()
            self._proxy = _ProxyServer(self, ("127.0.0.1", port))
        except BaseException:
            self.close()
            raise
        self.endpoint = f"http://127.0.0.1:{self._proxy.server_address[1]}"
        threading.Thread(
            target=self._proxy.serve_forever, args=(0.05,), name="loopback-s3", daemon=True
        ).start()
        return self

    def _wait_for_server(self) -> None:
        assert self._server is not None
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.server_endpoint}/moto-api/", timeout=1).close()
                return
            except OSError:
                if self._server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start (log {self.log_path})") from None
                time.sleep(0.1)

    def close(self) -> None:
        """Stop the proxy (dropping its open connections) and moto."""
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
            self._proxy.drop_connections()
            self._proxy = None
        if self._server is not None:
            self._server.terminate()
            try:
                self._server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
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
            counting._stop()

    def inject(
        self,
        rate: float,
        seed: int = 0,
        kinds: Sequence[str] = FAULT_KINDS,
        limit: int | None = None,
    ) -> None:
        """Fail ``rate`` of the requests from now on (0 stops), each with a kind drawn from
        ``kinds`` by a random generator seeded with ``seed``; at most ``limit`` faults."""
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown or not kinds:
            raise ValueError(f"fault kinds must be some of {FAULT_KINDS}, not {list(kinds)}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], not {rate}")
        with self._lock:
            self._rate = float(rate)
            self._kinds = tuple(kinds)
            self._random = random.Random(seed)
            self._left = limit

    def _observe(self, kind: str) -> str | None:
        """Count one request; return the fault to inject on it, if any."""
        with self._lock:
            self._counts[kind] += 1
            if self._rate <= 0.0 or self._left == 0 or self._random.random() >= self._rate:
                return None
            if self._left is not None:
                self._left -= 1
            fault = self._random.choice(self._kinds)
            self._faults[fault] += 1
            return fault
