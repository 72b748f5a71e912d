"""Running the `pdctl efa-check` Jobs: both sides and their headless Services created together
(the two nodes join in parallel), both bounded by one deadline and deleted however the run ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pdctl.cluster_jobs import PodState
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
