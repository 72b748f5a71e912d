"""Load that records what clients saw, for measuring a disruption: a short request every
``probe_interval_s`` (like a client polling) and ``streams`` long streams always in flight, each
outcome with its start, end and error; and the Serve application's status over the same time.

Every request has a timeout; ``stop()`` waits a bounded time for what is still running.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

PROBE_TIMEOUT_S = 30.0
STREAM_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Outcome:
    kind: str  # "probe" or "stream"
    start: float  # time.monotonic()
    end: float
    ok: bool
    error: str = ""
    tokens: int = 0


def _post(url: str, body: dict[str, Any]) -> urllib.request.Request:
    return urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )


def _error(problem: BaseException) -> str:
    if isinstance(problem, urllib.error.HTTPError):
        return f"HTTP {problem.code}"
    return type(problem).__name__


@dataclass(eq=False)
class Load:
    base_url: str
    model: str
    probe_interval_s: float = 0.1
    streams: int = 4
    stream_tokens: int = 400
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=48, thread_name_prefix="probe")
        self._threads: list[threading.Thread] = []

    def _add(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)

    def _probe(self) -> None:
        start = time.monotonic()
        body = {"model": self.model, "prompt": "probe", "max_tokens": 2}
        try:
            request = _post(f"{self.base_url}/v1/completions", body)
            with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:
                answer = json.loads(response.read())
            ok = bool(answer["choices"][0]["text"])
            self._add(Outcome("probe", start, time.monotonic(), ok, "" if ok else "empty"))
        except (OSError, ValueError, KeyError) as problem:
            self._add(Outcome("probe", start, time.monotonic(), False, _error(problem)))

    def _stream(self) -> None:
        start = time.monotonic()
        body = {
            "model": self.model,
            "prompt": "a long stream",
            "max_tokens": self.stream_tokens,
            "stream": True,
        }
        tokens, done = 0, False
        try:
            request = _post(f"{self.base_url}/v1/completions", body)
            with urllib.request.urlopen(request, timeout=STREAM_TIMEOUT_S) as response:
                for line in response:
                    text = line.decode().strip()
                    if text == "data: [DONE]":
                        done = True
                    elif text.startswith("data: ") and '"text"' in text:
                        tokens += 1
                    if time.monotonic() - start > STREAM_TIMEOUT_S:
                        raise TimeoutError("stream too slow")
            ok = done and tokens == self.stream_tokens
            error = "" if ok else f"ended after {tokens} tokens"
            self._add(Outcome("stream", start, time.monotonic(), ok, error, tokens))
        except (OSError, ValueError) as problem:
            self._add(Outcome("stream", start, time.monotonic(), False, _error(problem), tokens))

    def _probe_loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._pool.submit(self._probe)
            next_at += self.probe_interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _stream_loop(self) -> None:
        while not self._stop.is_set():
            self._stream()

    def start(self) -> None:
        loops = [self._probe_loop] + [self._stream_loop] * self.streams
        self._threads = [threading.Thread(target=loop, daemon=True) for loop in loops]
        for thread in self._threads:
            thread.start()

    def stop(self) -> list[Outcome]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=STREAM_TIMEOUT_S + 5)
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            return sorted(self.outcomes, key=lambda outcome: outcome.start)


@dataclass(eq=False)
class StatusLog:
    """The application's status every ``interval_s``, as (monotonic time, status)."""

    read: Callable[[], str]
    interval_s: float = 0.5
    seen: list[tuple[float, str]] = field(default_factory=list)

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                status = self.read()
            except (OSError, ValueError, KeyError, RuntimeError) as problem:
                status = f"unreadable ({type(problem).__name__})"
            self.seen.append((time.monotonic(), status))
            stop.wait(self.interval_s)

    @contextlib.contextmanager
    def running(self) -> Iterator[StatusLog]:
        stop = threading.Event()
        thread = threading.Thread(target=self._loop, args=(stop,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=30)


def measure(outcomes: list[Outcome], event: float, statuses: list[tuple[float, str]]) -> dict:
    """What clients saw around a disruption at ``event`` (monotonic), in seconds from it."""
    probes = [o for o in outcomes if o.kind == "probe"]
    streams = [o for o in outcomes if o.kind == "stream"]
    after = [o for o in probes if o.end >= event]
    served = sorted(o.end for o in after if o.ok)
    window_end = max((o.end for o in probes), default=event)
    edges = [event, *served, window_end]
    failed = [o for o in after if not o.ok]
    last_failed_start = max((o.start for o in failed), default=None)
    recovered = (
        0.0
        if last_failed_start is None
        else min((o.end for o in after if o.ok and o.start > last_failed_start), default=window_end)
        - event
    )
    in_flight = [s for s in streams if s.start < event < s.end]
    changed = [t for t, status in statuses if t >= event and status != "RUNNING"]
    running_again = [
        t for t, status in statuses if changed and t > changed[0] and status == "RUNNING"
    ]
    return {
        "probe_requests": len(after),
        "probe_requests_failed": len(failed),
        "probe_errors": sorted({o.error for o in failed}),
        "probe_failures_started_at_s": [round(o.start - event, 1) for o in failed][:20],
        "slowest_served_probe_s": round(
            max((o.end - o.start for o in after if o.ok), default=0), 2
        ),
        "longest_time_nothing_served_s": round(max(b - a for a, b in itertools.pairwise(edges)), 2),
        "recovered_after_s": round(recovered, 2),
        "streams_in_flight": len(in_flight),
        "streams_in_flight_broken": sum(not s.ok for s in in_flight),
        "streams_started_after_failed": sum(not s.ok for s in streams if s.start >= event),
        "status_left_running_after_s": round(changed[0] - event, 2) if changed else None,
        "status_running_again_after_s": (
            round(running_again[0] - event, 2) if running_again else None
        ),
        "statuses_seen": sorted({status for t, status in statuses if t >= event}),
    }
