"""Running the `pdctl efa-check` Jobs: both sides and their headless Services created together
(the two nodes join in parallel), both bounded by one deadline and deleted however the run ends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pdctl.efa_jobs import (
    CLIENT_ROLE,
    SERVER_ROLE,
    EfaCheckPlan,
    job_manifest,
    job_name,
    service_manifest,
    service_name,
)
from pdctl.kube import describe_api_error

POLL_SECONDS = 5.0
ROLES = (CLIENT_ROLE, SERVER_ROLE)


class EfaCheckError(Exception):
    """The check could not run to the end: one line saying where it stopped and why."""


@dataclass(frozen=True)
class PodState:
    phase: str  # Pending, Running, Succeeded, Failed, or "" when no pod exists yet
    ip: str | None = None
    node: str | None = None
    waiting: str = ""  # why it is not running: the scheduler's or the kubelet's message
    ran: bool = False  # its container started at some point


class JobApi(Protocol):
    def create(self, manifest: dict[str, Any]) -> None: ...
    def pod_state(self, namespace: str, job: str) -> PodState: ...
    def logs(self, namespace: str, job: str) -> str: ...
    def delete(self, kind: str, namespace: str, name: str) -> None: ...


@dataclass(frozen=True)
class RunOutput:
    logs: dict[str, str]  # per role
    nodes: dict[str, str | None]
    unfinished: list[str] = field(default_factory=list)  # roles still running at the deadline
    cleanup_errors: list[str] = field(default_factory=list)  # objects left to their TTL


FINISHED = ("Succeeded", "Failed")
STARTED = ("Running", *FINISHED)


def run(
    api: JobApi,
    plan: EfaCheckPlan,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RunOutput:
    """Both Jobs at once; then poll until both pods finished or the deadline. A side that never
    started by then ends the run with the scheduler's or kubelet's reason; a side that started
    but had not finished is judged on what it printed (its log says where it stopped)."""
    deadline = clock() + plan.deadline_seconds
    created: list[tuple[str, str]] = []  # (kind, name)
    try:
        for role in ROLES:
            api.create(service_manifest(plan, role))
            created.append(("Service", service_name(plan, role)))
        for role in ROLES:
            api.create(job_manifest(plan, role))
            created.append(("Job", job_name(plan, role)))
        states = _await_both(api, plan, deadline, clock, sleep)
        never_started = [role for role in ROLES if states[role].phase not in STARTED]
        if never_started:
            role = never_started[0]
            state = states[role]
            raise EfaCheckError(
                f"{job_name(plan, role)} has not started after {plan.deadline_seconds} s "
                f"({state.phase or 'no pod'}{': ' + state.waiting if state.waiting else ''}); "
                "a side needs a node whose EFA devices no Ray worker holds "
                "(docs/observability.md, 'EFA runbook', step 2)"
            )
        logs = {role: _log(api, plan, role) for role in ROLES}
        nodes = {role: states[role].node for role in ROLES}
        unfinished = [role for role in ROLES if states[role].phase not in FINISHED]
    except BaseException:
        _delete_all(api, plan.namespace, created)  # best effort; the first error is the story
        raise
    return RunOutput(logs, nodes, unfinished, _delete_all(api, plan.namespace, created))


def _await_both(
    api: JobApi,
    plan: EfaCheckPlan,
    deadline: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> dict[str, PodState]:
    """Until both finished, or the deadline. A pod that failed without ever running (the image
    cannot be pulled, say) ends the wait at once: its partner would wait for it to the end."""
    while True:
        states = {role: api.pod_state(plan.namespace, job_name(plan, role)) for role in ROLES}
        for role, state in states.items():
            if state.phase == "Failed" and not state.ran:
                raise EfaCheckError(
                    f"{job_name(plan, role)} failed before its container ran: "
                    f"{state.waiting or 'no reason given'}" + _log_tail(api, plan, role)
                )
        if all(state.phase in FINISHED for state in states.values()) or clock() >= deadline:
            return states
        sleep(POLL_SECONDS)


def _log(api: JobApi, plan: EfaCheckPlan, role: str) -> str:
    """ "" when it cannot be read (the pod already gone): the verdict then says that side did
    not run to the end, which is what can be known."""
    try:
        return api.logs(plan.namespace, job_name(plan, role))
    except Exception:  # any API failure: judged as a side that printed nothing
        return ""


def _log_tail(api: JobApi, plan: EfaCheckPlan, role: str) -> str:
    tail = _log(api, plan, role)[-300:]
    return f"; its log ends: {tail}" if tail.strip() else ""


def _delete_all(api: JobApi, namespace: str, objects: list[tuple[str, str]]) -> list[str]:
    """Tries every object even if one deletion fails; returns what could not be deleted (Jobs
    end by activeDeadlineSeconds and go with ttlSecondsAfterFinished; a Service stays)."""
    errors = []
    for kind, name in objects:
        try:
            api.delete(kind, namespace, name)
        except Exception as error:  # any API failure: the next object still gets deleted
            # The API server's own words, not the client exception's headers and body.
            errors.append(f"{kind} {name}: {describe_api_error(error, None)}")
    return errors


class KubernetesJobs:
    """JobApi on the kubeconfig's cluster, every call bounded."""

    def __init__(self, request_timeout: float = 30) -> None:
        from kubernetes import client
        from kubernetes import config as kube_config

        # KUBECONFIG read now, as pdctl.kube.load_kubeconfig does: the client reads it once,
        # when it is first imported, and a long-lived process may have moved it since.
        kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
        self._batch, self._core = client.BatchV1Api(), client.CoreV1Api()
        self._timeout = request_timeout

    def create(self, manifest: dict[str, Any]) -> None:
        namespace = manifest["metadata"]["namespace"]
        if manifest["kind"] == "Service":
            self._core.create_namespaced_service(
                namespace, manifest, _request_timeout=self._timeout
            )
        else:
            self._batch.create_namespaced_job(namespace, manifest, _request_timeout=self._timeout)

    def _pod(self, namespace: str, job: str) -> Any:
        pods = self._core.list_namespaced_pod(
            namespace, label_selector=f"job-name={job}", _request_timeout=self._timeout
        ).items
        return pods[0] if pods else None

    def pod_state(self, namespace: str, job: str) -> PodState:
        pod = self._pod(namespace, job)
        if pod is None:
            return PodState("")
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

    def logs(self, namespace: str, job: str) -> str:
        pod = self._pod(namespace, job)
        if pod is None:
            return ""
        return self._core.read_namespaced_pod_log(
            pod.metadata.name, namespace, _request_timeout=self._timeout
        )

    def delete(self, kind: str, namespace: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            if kind == "Service":
                self._core.delete_namespaced_service(
                    name, namespace, _request_timeout=self._timeout
                )
            else:
                self._batch.delete_namespaced_job(
                    name, namespace, propagation_policy="Background", _request_timeout=self._timeout
                )
        except ApiException as error:
            if error.status != 404:
                raise
