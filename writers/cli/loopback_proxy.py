"""The counting, fault-injecting HTTP/1.1 proxy in front of moto (``loopback_s3``).

It forwards each request byte for byte (method, path and query, headers, body with its
chunked framing) and streams the reply back. Before forwarding it asks its owner
(:class:`Observer`) which fault, if any, to inject: ``503`` and ``500`` are answered without
forwarding, ``reset`` closes the connection abruptly (not forwarded), ``lost`` forwards (the
server acts on it) then resets before the reply. moto's own ``/moto-api`` is never faulted.
"""

from __future__ import annotations

import http.client
import socket
import struct
import uuid
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

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


class Observer(Protocol):
    def observe(self, kind: str, target: str, body: bytes) -> str | None:
        """Count a request (kind, target path and query, body as sent); the fault to inject."""


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


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not hold up close()
    # socketserver's default backlog of 5 drops connection attempts of many concurrent
    # clients on a busy machine (each a SYN retry of 1 s or more: a stall no real S3 has)
    request_queue_size = 128

    def __init__(self, owner: Observer, upstream: tuple[str, int]) -> None:
        self.owner = owner
        self.upstream = upstream
        self.open_connections: set[socket.socket] = set()
        super().__init__(("127.0.0.1", 0), ProxyHandler)


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ProxyServer

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
            fault = self.server.owner.observe(
                request_kind(self.command, self.path), self.path, body
            )
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
