"""A misbehaving HTTP server on 127.0.0.1, byte by byte: each route is a function that writes
whatever it likes on the raw socket (headers a byte at a time, a stream cut mid-chunk, comments
for ever). Every loop is bounded: a route's own counts, and the server's lifetime, after which
it stops by itself even if a test forgot it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

LIFETIME_SECONDS = 30.0


@dataclass
class Request:
    method: str
    path: str
    body: bytes
    index: int  # how many requests this route answered before


Route = Callable[["Connection", Request], None]


@dataclass
class Connection:
    sock: socket.socket
    stop: threading.Event

    def send(self, data: bytes | str) -> bool:
        """False once the client is gone or the server stops: routes end their loops there."""
        if self.stop.is_set():
            return False
        try:
            self.sock.sendall(data.encode() if isinstance(data, str) else data)
            return True
        except OSError:
            return False

    def trickle(self, data: bytes | str, every: float, limit_seconds: float = 20.0) -> None:
        """One byte per `every` seconds, for at most `limit_seconds`."""
        payload = data.encode() if isinstance(data, str) else data
        ends = time.monotonic() + limit_seconds
        for index in range(len(payload)):
            if time.monotonic() > ends or not self.send(payload[index : index + 1]):
                return
            self.stop.wait(every)

    def respond(
        self,
        body: bytes | str,
        content_type: str = "application/json",
        status: str = "200 OK",
        extra_headers: str = "",
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n{extra_headers}\r\n".encode()
            + data
        )

    def respond_json(self, value: object, status: str = "200 OK") -> None:
        self.respond(json.dumps(value), status=status)

    def headers_only(self, content_type: str = "text/event-stream", chunked: bool = False) -> None:
        framing = "Transfer-Encoding: chunked\r\n" if chunked else ""
        self.send(
            f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{framing}Connection: close\r\n\r\n"
        )


@dataclass
class HostileServer:
    routes: dict[str, Route]
    lifetime: float = LIFETIME_SECONDS
    stop: threading.Event = field(default_factory=threading.Event)
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.started = time.monotonic()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set() and time.monotonic() - self.started < self.lifetime:
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()
        self.stop.set()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            sock.settimeout(5)
            try:
                request = self._read_request(sock)
            except (OSError, ValueError):
                return
            if request is None:
                return
            route = self._route(request.path)
            request.index = self.counts.get(route, 0)
            self.counts[route] = request.index + 1
            self.routes[route](Connection(sock, self.stop), request)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _route(self, path: str) -> str:
        bare = path.split("?", 1)[0]
        matches = [route for route in self.routes if bare.startswith(route)]
        return max(matches, key=len) if matches else next(iter(self.routes))

    @staticmethod
    def _read_request(sock: socket.socket) -> Request | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return Request(method, path, body, 0)

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@contextlib.contextmanager
def hostile_server(routes: dict[str, Route], lifetime: float = LIFETIME_SECONDS) -> Iterator[str]:
    server = HostileServer(routes, lifetime)
    try:
        yield server.url
    finally:
        server.close()


def chunked(piece: bytes | str) -> bytes:
    """One chunk of Transfer-Encoding: chunked (RFC 9112, 7.1)."""
    data = piece.encode() if isinstance(piece, str) else piece
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def kubeconfig_for(folder: Path, url: str) -> str:
    """A kubeconfig whose one cluster is the server at ``url`` (a bearer token, no TLS)."""
    path = folder / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": {"server": url}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": "me"}}],
                "current-context": "local",
            }
        )
    )
    return str(path)
