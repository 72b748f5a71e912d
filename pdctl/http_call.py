"""HTTP calls bounded as a whole, from connecting to the last byte.

A socket timeout bounds one read, not a call: a server that trickles its headers a byte at a
time, or keeps a stream alive with comments, resets it with every byte and holds a client for
ever (that is all the openai client's and urllib's timeouts promise). Here one deadline covers
the call: a timer shuts the socket down when it passes, which ends any read in progress, and
every read checks the deadline, so a body cut by the timer is never taken for a whole one.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pdctl import sigv4

T = TypeVar("T")

READ_SIZE = 65536
CONNECT_SECONDS_MAX = 10.0


class HttpCallError(Exception):
    """The call ended without a whole answer; one line saying why."""


class UnreachableError(HttpCallError):
    """Nothing answered at the address: no connection, no name, no TLS session."""


class DeadlineExceededError(HttpCallError):
    pass


@dataclass
class Deadline:
    seconds: float
    started: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def check(self, what: str) -> None:
        if self.remaining() <= 0:
            raise DeadlineExceededError(f"{what}: no complete answer within {self.seconds:g} s")


def _cut(connection: http.client.HTTPConnection) -> None:
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)


def _describe(error: BaseException) -> str:
    if isinstance(error, socket.gaierror):
        return f"cannot resolve the host ({error.strerror or error})"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError | socket.timeout):
        return "no answer in time"
    return f"{type(error).__name__}: {error}"


@contextmanager
def open_response(
    method: str,
    url: str,
    deadline: Deadline,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Iterator[http.client.HTTPResponse]:
    """The response once its headers arrived; reads of its body go through `read_body` or
    `iter_chunks`. Errors inside the block that come from the socket or from HTTP parsing are
    turned into HttpCallError, naming the deadline when it is what ended them."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpCallError(f"{url}: not an http(s) URL with a host")
    try:
        port = parts.port
    except ValueError as error:
        raise HttpCallError(f"{url}: {error}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        headers = sigv4.signed_headers(method, url, body, headers or {})
    except sigv4.MissingCredentialsError as error:
        raise HttpCallError(f"{url}: {error}") from None
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connect_seconds = max(min(deadline.remaining(), CONNECT_SECONDS_MAX), 0.001)
    connection = kind(parts.hostname, port, timeout=connect_seconds)
    timer = threading.Timer(max(deadline.remaining(), 0.0), _cut, args=(connection,))
    timer.daemon = True
    timer.start()
    try:
        try:
            connection.connect()
        except OSError as error:
            raise UnreachableError(f"{url}: connection failed ({_describe(error)})") from None
        try:
            connection.sock.settimeout(max(deadline.remaining(), 0.001))
            connection.request(method, target, body=body, headers=headers or {})
            response = connection.getresponse()
            _check_encoding(url, response)
            yield response
        except (OSError, http.client.HTTPException, ValueError) as error:
            deadline.check(url)
            raise HttpCallError(f"{url}: {_describe(error)}") from None
    finally:
        timer.cancel()
        connection.close()


class UnrequestedEncodingError(HttpCallError):
    """The body came in a content coding the request did not accept."""


def _check_encoding(url: str, response: http.client.HTTPResponse) -> None:
    """http.client asks for the body as it is (it sends `Accept-Encoding: identity`) and decodes
    no coding: a gzip or br body read as text would look like garbage, and be judged as "not
    JSON" or "not metrics". Named as what it is instead (RFC 9110, 8.4 and 12.5.3: a server
    should not send a coding the request did not accept; a proxy in between may)."""
    codings = [
        coding.strip().lower()
        for coding in (response.getheader("Content-Encoding") or "").split(",")
        if coding.strip()
    ]
    unrequested = [coding for coding in codings if coding != "identity"]
    if unrequested:
        raise UnrequestedEncodingError(
            f"{url}: the answer is encoded {', '.join(unrequested)} (Content-Encoding), which "
            "pdctl did not ask for (it sends Accept-Encoding: identity) and does not decode; "
            "a proxy or load balancer in between may have compressed it"
        )


def iter_chunks(
    response: http.client.HTTPResponse, deadline: Deadline, what: str, max_bytes: int
) -> Iterator[bytes]:
    """The body as it arrives; raises when the deadline passes or the body outgrows
    `max_bytes`."""
    total = 0
    while True:
        chunk = response.read1(READ_SIZE)
        deadline.check(what)  # a read the timer ended looks like the end of the body
        if not chunk:
            if response.length:  # read1 ends quietly when a length-framed body is cut
                raise HttpCallError(
                    f"{what}: the body ended {response.length:,} bytes short of its length"
                )
            return
        total += len(chunk)
        if total > max_bytes:
            raise HttpCallError(f"{what}: more than {max_bytes:,} bytes")
        yield chunk


def read_body(
    response: http.client.HTTPResponse, deadline: Deadline, what: str, max_bytes: int
) -> bytes:
    return b"".join(iter_chunks(response, deadline, what, max_bytes))


def within(seconds: float, call: Callable[[], T], what: str) -> T:
    """`call()` bounded as a whole, for clients whose own timeouts bound one read only (the
    Kubernetes client, urllib). The call runs in a daemon thread, abandoned when time is up:
    the process ends soon after, and a daemon thread cannot hold it open. Raises TimeoutError."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True, name=f"pdctl: {what}")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"{what}: no complete answer within {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
