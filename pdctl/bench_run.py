"""Running the `pdctl bench` Job: create it, wait for it within a deadline, read its log.

The Kubernetes answers are read defensively (a Job status whose counts are missing, no pod or
several, a log that is not text): each ends the run with one line, never a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pdctl.http_call import within
from pdctl.output import CannotRunError

if TYPE_CHECKING:
    from app_config import Settings

POLL_SECONDS = 10.0
CALL_SECONDS = 60.0  # one Kubernetes call, as a whole
LOG_BYTES_MAX = 20_000_000
CLOCK = time.monotonic


@dataclass(frozen=True)
class JobState:
    succeeded: int
    failed: int
    active: int


class BenchJobs(Protocol):
    def create(self, manifest: dict[str, Any]) -> None: ...
    def state(self, namespace: str, name: str) -> JobState: ...
    def logs(self, namespace: str, name: str) -> str: ...


@dataclass(frozen=True)
class BenchOutcome:
    succeeded: bool
    logs: str


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


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
    return BenchOutcome(succeeded=bool(state.succeeded), logs=jobs.logs(namespace, name))


class KubernetesBenchJobs:
    """BenchJobs through the Kubernetes API of the current kubeconfig (loaded by the caller)."""

    def __init__(self, settings: Settings) -> None:
        from kubernetes import client

        self._settings = settings
        self._api = client.ApiClient()
        self._batch = client.BatchV1Api(self._api)
        self._core = client.CoreV1Api(self._api)

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        from pdctl import kube

        try:
            return within(CALL_SECONDS, call, what)
        except TimeoutError as error:
            raise CannotRunError(str(error), kube.kubeconfig_hint(self._settings)) from None
        except CannotRunError:
            raise
        except Exception as error:
            raise kube.describe_api_error(error, self._settings) from None

    def create(self, manifest: dict[str, Any]) -> None:
        namespace = manifest["metadata"]["namespace"]
        self._call(
            "creating the bench Job",
            lambda: self._batch.create_namespaced_job(
                namespace, manifest, _request_timeout=CALL_SECONDS
            ),
        )

    def state(self, namespace: str, name: str) -> JobState:
        job = self._call(
            "reading the bench Job",
            lambda: self._batch.read_namespaced_job_status(
                name, namespace, _request_timeout=CALL_SECONDS
            ),
        )
        status = getattr(job, "status", None)
        return JobState(
            succeeded=_count(getattr(status, "succeeded", None)),
            failed=_count(getattr(status, "failed", None)),
            active=_count(getattr(status, "active", None)),
        )

    def logs(self, namespace: str, name: str) -> str:
        pods = self._call(
            "finding the bench pod",
            lambda: self._core.list_namespaced_pod(
                namespace, label_selector=f"job-name={name}", _request_timeout=CALL_SECONDS
            ),
        )
        items = [pod for pod in getattr(pods, "items", None) or [] if pod.metadata]
        if not items:
            raise CannotRunError(f"Job {name} has no pod left to read the log of")
        # backoffLimit 0 gives one pod; should there be more, the newest ran last.
        pod = max(items, key=lambda p: str(p.metadata.creation_timestamp or ""))
        logs = self._call(
            "reading the bench log",
            lambda: self._core.read_namespaced_pod_log(
                pod.metadata.name, namespace, _request_timeout=CALL_SECONDS
            ),
        )
        if not isinstance(logs, str):
            raise CannotRunError(f"the log of {pod.metadata.name} is not text")
        return logs[-LOG_BYTES_MAX:]
