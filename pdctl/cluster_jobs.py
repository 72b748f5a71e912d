"""The Kubernetes Jobs pdctl runs on the cluster, `efa-check`'s device pairs (with their headless
Services) and `bench`'s load generator, through one client: every call bounded in time, every
failure the API server's own words with what to do (pdctl.kube.describe_api_error).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pdctl.http_call import within
from pdctl.output import CannotRunError

if TYPE_CHECKING:
    from app_config import Settings

CALL_SECONDS = 60.0  # one Kubernetes call, as a whole
LOG_BYTES_MAX = 20_000_000


@dataclass(frozen=True)
class PodState:
    """The pod of a Job, as efa-check reads it."""

    phase: str  # Pending, Running, Succeeded, Failed, or "" when no pod exists yet
    ip: str | None = None
    node: str | None = None
    waiting: str = ""  # why it is not running: the scheduler's or the kubelet's message
    ran: bool = False  # its container started at some point


@dataclass(frozen=True)
class JobState:
    """A Job's own counts, as bench reads them."""

    succeeded: int
    failed: int
    active: int


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class ClusterJobs:
    """Jobs and Services on the kubeconfig's cluster (KUBECONFIG read when this is made: the
    client reads it once, when first imported, and a long-lived process may have moved it)."""

    def __init__(self, settings: Settings | None = None, call_seconds: float | None = None):
        from kubernetes import client
        from kubernetes import config as kube_config

        kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
        self._settings = settings
        self._batch, self._core = client.BatchV1Api(), client.CoreV1Api()
        self._seconds = CALL_SECONDS if call_seconds is None else call_seconds

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        from pdctl import kube

        try:
            return within(self._seconds, call, what)
        except TimeoutError as error:
            raise CannotRunError(str(error), kube.kubeconfig_hint(self._settings)) from None
        except CannotRunError:
            raise
        except Exception as error:
            raise kube.describe_api_error(error, self._settings) from None

    def create(self, manifest: dict[str, Any]) -> None:
        namespace, kind = manifest["metadata"]["namespace"], manifest["kind"]
        create = (
            self._core.create_namespaced_service
            if kind == "Service"
            else self._batch.create_namespaced_job
        )
        self._call(
            f"creating {kind} {manifest['metadata']['name']}",
            lambda: create(namespace, manifest, _request_timeout=self._seconds),
        )

    def _pods(self, namespace: str, job: str) -> list[Any]:
        pods = self._call(
            f"finding the pod of Job {job}",
            lambda: self._core.list_namespaced_pod(
                namespace, label_selector=f"job-name={job}", _request_timeout=self._seconds
            ),
        )
        items = [pod for pod in getattr(pods, "items", None) or [] if pod.metadata]
        # backoffLimit 0 gives one pod; should there be more, the newest ran last.
        return sorted(items, key=lambda p: str(p.metadata.creation_timestamp or ""))

    def pod_state(self, namespace: str, job: str) -> PodState:
        pods = self._pods(namespace, job)
        if not pods:
            return PodState("")
        pod = pods[-1]
        status = pod.status
        reasons = [
            f"{c.reason}: {c.message}"
            for c in status.conditions or []
            if c.status != "True" and c.message
        ] + [
            f"{s.state.waiting.reason}: {s.state.waiting.message or ''}".rstrip(": ")
            for s in status.container_statuses or []
            if s.state and s.state.waiting
        ]
        ran = any(
            s.state and (s.state.running or (s.state.terminated and s.state.terminated.started_at))
            for s in status.container_statuses or []
        )
        return PodState(
            status.phase or "", status.pod_ip, pod.spec.node_name, "; ".join(reasons), bool(ran)
        )

    def state(self, namespace: str, job: str) -> JobState:
        found = self._call(
            f"reading Job {job}",
            lambda: self._batch.read_namespaced_job_status(
                job, namespace, _request_timeout=self._seconds
            ),
        )
        status = getattr(found, "status", None)
        return JobState(
            succeeded=_count(getattr(status, "succeeded", None)),
            failed=_count(getattr(status, "failed", None)),
            active=_count(getattr(status, "active", None)),
        )

    def logs(self, namespace: str, job: str) -> str:
        """The newest pod's log, at most LOG_BYTES_MAX of its end; "" when no pod exists."""
        pods = self._pods(namespace, job)
        if not pods:
            return ""
        name = pods[-1].metadata.name
        logs = self._call(
            f"reading the log of {name}",
            lambda: self._core.read_namespaced_pod_log(
                name, namespace, _request_timeout=self._seconds
            ),
        )
        if not isinstance(logs, str):
            raise CannotRunError(f"the log of {name} is not text")
        return logs[-LOG_BYTES_MAX:]

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """Gone already (404) counts as deleted."""
        from kubernetes.client.exceptions import ApiException

        def delete() -> None:
            try:
                if kind == "Service":
                    self._core.delete_namespaced_service(
                        name, namespace, _request_timeout=self._seconds
                    )
                else:
                    self._batch.delete_namespaced_job(
                        name,
                        namespace,
                        propagation_policy="Background",
                        _request_timeout=self._seconds,
                    )
            except ApiException as error:
                if error.status != 404:
                    raise

        self._call(f"deleting {kind} {name}", delete)
