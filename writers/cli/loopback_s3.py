"""A real S3-protocol server on loopback for tests, benchmarks and the demo.

:class:`LoopbackS3` starts moto's S3 server (it enforces ``If-None-Match`` and ``If-Match``
with 412, as S3 does) on a free loopback port and, in front of it, a threaded HTTP/1.1 proxy
that clients talk to. The proxy forwards each request byte for byte (method, path and query,
headers, body with its chunked framing) and streams the reply back; on the way it counts
requests by kind (LIST, HEAD, GET, PUT, DELETE with multi-object deletes, POST) and injects
faults at a seeded random rate: ``503`` SlowDown and ``500`` InternalError answered without
forwarding, ``reset`` (connection reset, not forwarded) and ``lost`` (forwarded, so the server
acts on it, then the connection is reset before the reply); not on moto's own ``/moto-api``.
Buckets are addressed path-style, as S3 clients do for an IP endpoint.
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
from contextlib import contextmanager, suppress
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
FAULT_KINDS = ("503", "500", "reset", "lost")
# Headers about one hop, not the message, kept from the other hop; the proxy answers
# ``Expect: 100-continue`` itself before it reads the body.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "upgrade", "expect"})
REPLY_FRAMING = HOP_BY_HOP | {"transfer-encoding", "trailer"}
ERROR_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>{}</Code><Message>{}</Message><RequestId>{}</RequestId></Error>"
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


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not hold up close()
    # socketserver's default backlog of 5 drops connection attempts of many concurrent
    # clients on a busy machine (each a SYN retry of 1 s or more: a stall no real S3 has)
    request_queue_size = 128

    def __init__(self, owner: LoopbackS3, upstream: tuple[str, int]) -> None:
        self.owner = owner
        self.upstream = upstream
        self.open_connections: set[socket.socket] = set()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle stall
        self.upstream = http.client.HTTPConnection(*self.server.upstream, timeout=300)
        self.server.open_connections.add(self.connection)  # set.add/discard: atomic

    def finish(self) -> None:
        self.server.open_connections.discard(self.connection)
        self.upstream.close()
        with suppress(OSError):
            super().finish()

    def handle(self) -> None:
        try:
            super().handle()
        except (OSError, http.client.HTTPException):
            self.close_connection = True  # the client or the server went away mid-reply

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests' output is not the place for an access log

    def do_GET(self) -> None:
        body = self._read_body()
        if body is None:
            self.close_connection = True
            return
        fault = None
        if not urlsplit(self.path).path.startswith("/moto-api"):
            fault = self.server.owner._observe(request_kind(self.command, self.path))
        if fault in ERRORS:
            return self._answer_error(*ERRORS[fault])
        if fault == "reset":
            return self._reset()
        try:
            reply = self._exchange(body)
        except (OSError, http.client.HTTPException) as error:
            self.upstream.close()
            return self._answer_error(502, "BadGateway", f"loopback proxy: {error!r}")
        if fault == "lost":
            reply.read()
            return self._reset()
        self._relay(reply)

    do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = do_GET  # all alike

    @property
    def _chunked(self) -> bool:
        return self.headers.get("Transfer-Encoding", "").lower().rstrip().endswith("chunked")

    def _read_body(self) -> bytes | None:
        """The body as sent, chunked framing and trailers included (None: the client left)."""
        if not self._chunked:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            return body if len(body) == length else None
        raw, size = bytearray(), -1
        while True:  # chunks (size line, data, CRLF), the last of size 0, trailers, CRLF
            line = self.rfile.readline(PIECE + 1)
            if not line.endswith(b"\n"):
                return None
            raw += line
            if size == 0:
                if line in (b"\r\n", b"\n"):
                    return bytes(raw)
                continue
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size:
                data = self.rfile.read(size + 2)
                if len(data) != size + 2:
                    return None
                raw += data

    def _exchange(self, body: bytes) -> http.client.HTTPResponse:
        """Send the request to moto, read its reply's head (reconnecting once if moto closed
        a kept-alive connection)."""
        while True:
            fresh = self.upstream.sock is None
            try:
                self.upstream.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                for name, value in self.headers.items():
                    lower = name.lower()
                    if lower in HOP_BY_HOP or (self._chunked and lower == "content-length"):
                        continue
                    self.upstream.putheader(name, value)
                self.upstream.endheaders(body or None)
                return self.upstream.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.upstream.close()
                if fresh:
                    raise

    def _relay(self, reply: http.client.HTTPResponse) -> None:
        """Send moto's reply to the client: its head as it came, its body streamed."""
        self.send_response_only(reply.status, reply.reason)
        for name, value in reply.getheaders():
            if name.lower() not in REPLY_FRAMING:
                self.send_header(name, value)
        if self.command == "HEAD" or reply.status in (204, 304) or reply.status < 200:
            reply.read()
            self.end_headers()
        elif reply.length is not None:
            self.end_headers()
            while piece := reply.read1(PIECE):
                self.wfile.write(piece)
        else:  # chunked, or ended by moto closing the connection: chunked to the client
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while piece := reply.read1(PIECE):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")

    def _answer_error(self, status: int, code: str, message: str) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        body = ERROR_XML.format(code, message, request_id).encode()
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
    """moto's S3 server behind a counting, fault-injecting proxy at :attr:`endpoint`."""

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
            self._proxy = _ProxyServer(self, ("127.0.0.1", port))
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
