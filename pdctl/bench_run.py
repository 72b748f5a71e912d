"""Running the `pdctl bench` Job: create it, wait for it within a deadline, read its log.

The Kubernetes answers are read defensively (a Job status whose counts are missing, no pod or
several, a log that is not text): each ends the run with one line, never a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pdctl.cluster_jobs import JobState
from pdctl.output import CannotRunError

if TYPE_CHECKING:
    pass

POLL_SECONDS = 10.0
CALL_SECONDS = 60.0  # one Kubernetes call, as a whole
LOG_BYTES_MAX = 20_000_000
CLOCK = time.monotonic


class BenchJobs(Protocol):
    def create(self, manifest: dict[str, Any]) -> None: ...
    def state(self, namespace: str, name: str) -> JobState: ...
    def logs(self, namespace: str, name: str) -> str: ...


@dataclass(frozen=True)
class BenchOutcome:
    succeeded: bool
    logs: str


def run(
    jobs: BenchJobs,
    manifest: dict[str, Any],
    deadline_seconds: float,
    progress: Callable[[str], None] = lambda _: None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    poll_seconds: float | None = None,
) -> BenchOutcome:
    clock = clock or CLOCK
    poll_seconds = POLL_SECONDS if poll_seconds is None else poll_seconds
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    jobs.create(manifest)
    deadline = clock() + deadline_seconds
    while True:
        state = jobs.state(namespace, name)
        if state.succeeded or state.failed:
            break
        if clock() > deadline:
            raise CannotRunError(
                f"Job {name} still running after {deadline_seconds / 60:g} min",
                f"kubectl -n {namespace} logs job/{name}; a larger --timeout-minutes",
            )
        progress(f"Job {name}: {state.active} pod(s) active")
        sleep(poll_seconds)
    logs = jobs.logs(namespace, name)
    if not logs and not state.succeeded:
        raise CannotRunError(f"Job {name} has no pod left to read the log of")
    return BenchOutcome(succeeded=bool(state.succeeded), logs=logs)
