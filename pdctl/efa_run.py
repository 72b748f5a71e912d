"""Running the `pdctl efa-check` Jobs: the decode-side server first, the prefill-side client
once the server has an address, both bounded by one deadline and deleted however the run ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pdctl.efa_jobs import (
    CLIENT_ROLE,
    SERVER_ROLE,
    EfaCheckPlan,
    client_script,
    job_manifest,
    job_name,
    server_script,
)

POLL_SECONDS = 5.0


class EfaCheckError(Exception):
    """The check could not run to the end: one line saying where it stopped and why."""


@dataclass(frozen=True)
class PodState:
    phase: str  # Pending, Running, Succeeded, Failed, or "" when no pod exists yet
    ip: str | None = None
    node: str | None = None
    waiting: str = ""  # why it is not running: the scheduler's or the kubelet's message


class JobApi(Protocol):
    def create_job(self, manifest: dict[str, Any]) -> None: ...
    def pod_state(self, namespace: str, job: str) -> PodState: ...
    def logs(self, namespace: str, job: str) -> str: ...
    def delete_job(self, namespace: str, job: str) -> None: ...


@dataclass(frozen=True)
class RunOutput:
    logs: dict[str, str]  # per role
    nodes: dict[str, str | None]
    cleanup_errors: list[str] = field(default_factory=list)  # Jobs left to their TTL


FINISHED = ("Succeeded", "Failed")


def run(
    api: JobApi,
    plan: EfaCheckPlan,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RunOutput:
    """The server first; the client once the server has an address. A server that ends before
    that (no EFA device listed, say) ends the run with its log, without a client."""
    deadline = clock() + plan.deadline_seconds
    created: list[str] = []

    def await_state(job: str, done: Callable[[PodState], bool], what: str) -> PodState:
        while True:
            state = api.pod_state(plan.namespace, job)
            if done(state):
                return state
            if clock() >= deadline:
                raise EfaCheckError(
                    f"{job} has not {what} after {plan.deadline_seconds} s "
                    f"({state.phase or 'no pod'}{': ' + state.waiting if state.waiting else ''}); "
                    "a side needs a node whose EFA devices no Ray worker holds (docs/pdctl.md, "
                    "'pdctl efa-check')"
                )
            sleep(POLL_SECONDS)

    def create(role: str, script: str) -> str:
        api.create_job(job_manifest(plan, role, script))
        created.append(job_name(plan, role))
        return created[-1]

    try:
        server_job = create(SERVER_ROLE, server_script(plan))
        server = await_state(
            server_job, lambda s: (s.phase == "Running" and bool(s.ip)) or s.phase in FINISHED,
            "started",
        )  # fmt: skip
        if server.phase == "Failed":
            tail = api.logs(plan.namespace, server_job)[-500:]
            raise EfaCheckError(
                f"{server_job} failed before the client started: {server.waiting or 'no reason'}"
                + (f"; its log ends: {tail}" if tail else "")
            )
        logs = {CLIENT_ROLE: ""}
        nodes: dict[str, str | None] = {CLIENT_ROLE: None}
        if server.phase != "Succeeded":
            client_job = create(CLIENT_ROLE, client_script(plan, server.ip or ""))
            client = await_state(client_job, lambda s: s.phase in FINISHED, "finished")
            logs[CLIENT_ROLE] = api.logs(plan.namespace, client_job)
            nodes[CLIENT_ROLE] = client.node
            server = await_state(server_job, lambda s: s.phase in FINISHED, "finished")
        logs[SERVER_ROLE] = api.logs(plan.namespace, server_job)
        nodes[SERVER_ROLE] = server.node
    except BaseException:
        _delete_all(api, plan.namespace, created)  # best effort; the first error is the story
        raise
    return RunOutput(logs, nodes, _delete_all(api, plan.namespace, created))


def _delete_all(api: JobApi, namespace: str, jobs: list[str]) -> list[str]:
    """Tries every Job even if one deletion fails; returns what could not be deleted (those end
    by activeDeadlineSeconds and go with ttlSecondsAfterFinished)."""
    errors = []
    for job in jobs:
        try:
            api.delete_job(namespace, job)
        except Exception as error:  # any API failure: the next Job still gets deleted
            errors.append(f"{job}: {type(error).__name__}: {error}")
    return errors


class KubernetesJobs:
    """JobApi on the kubeconfig's cluster, every call bounded."""

    def __init__(self, request_timeout: float = 30) -> None:
        from kubernetes import client
        from kubernetes import config as kube_config

        kube_config.load_kube_config()
        self._batch, self._core = client.BatchV1Api(), client.CoreV1Api()
        self._timeout = request_timeout

    def create_job(self, manifest: dict[str, Any]) -> None:
        self._batch.create_namespaced_job(
            manifest["metadata"]["namespace"], manifest, _request_timeout=self._timeout
        )

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
        return PodState(status.phase or "", status.pod_ip, pod.spec.node_name, "; ".join(reasons))

    def logs(self, namespace: str, job: str) -> str:
        pod = self._pod(namespace, job)
        if pod is None:
            return ""
        return self._core.read_namespaced_pod_log(
            pod.metadata.name, namespace, _request_timeout=self._timeout
        )

    def delete_job(self, namespace: str, job: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._batch.delete_namespaced_job(
                job, namespace, propagation_policy="Background", _request_timeout=self._timeout
            )
        except ApiException as error:
            if error.status != 404:
                raise
