"""`pdctl bench` end to end against a local stand-in for the Kubernetes API (the real
kubernetes client, a kubeconfig pointing at 127.0.0.1): it exits 0 only when every request of
the run completed, 1 when the run failed or lost requests, 2 when it could not run or read the
result; a stalled API server ends the command within its per-call bound."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdctl import bench_run, cluster_jobs
from pdctl.bench_job import RESULT_BEGIN, RESULT_END
from pdctl.cli import app
from tests.configurations import settings_for
from tests.pdctl.hostile_server import Connection, Request, hostile_server, kubeconfig_for
from tests.pdctl.test_pdctl_bench import NOTHING_COMPLETED, SAVED_RESULT

NAMESPACE = settings_for("default").serving.namespace
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


def _logs(result: dict) -> str:
    text = json.dumps(result)  # NaN as json.dump writes it, as vLLM does
    return f"Starting main benchmark run...\n{RESULT_BEGIN}\n{text}\n{RESULT_END}\n"


def cluster(job_status: dict, logs: str | None, pods: int = 1) -> dict:
    def create(conn: Connection, request: Request) -> None:
        job = json.loads(request.body)
        conn.respond_json(job, status="201 Created")

    def status(conn: Connection, request: Request) -> None:
        conn.respond_json({"kind": "Job", "apiVersion": "batch/v1", "status": job_status})

    def pod_list(conn: Connection, request: Request) -> None:
        items = [
            {"metadata": {"name": f"bench-{i}", "creationTimestamp": f"2026-12-01T00:00:0{i}Z"}}
            for i in range(pods)
        ]
        conn.respond_json({"kind": "PodList", "apiVersion": "v1", "items": items})

    def log(conn: Connection, request: Request) -> None:
        conn.respond(logs or "", "text/plain")

    return {JOBS: create, f"{JOBS}/": status, PODS: pod_list, f"{PODS}/": log}


def _bench(routes: dict, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    with hostile_server(routes) as url:
        result = CliRunner().invoke(
            app,
            ["bench", "--save", str(tmp_path / "result.json"), *extra],
            env={"KUBECONFIG": kubeconfig_for(tmp_path, url)},
        )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


ALL_COMPLETED = {**SAVED_RESULT, "completed": 200}


@pytest.mark.parametrize(
    ("job_status", "logs", "code", "fragment"),
    [
        ({"succeeded": 1}, _logs(ALL_COMPLETED), 0, "200 of 200 requests completed"),
        ({"succeeded": 1}, _logs(NOTHING_COMPLETED), 1, "0 of 200 requests completed"),
        ({"succeeded": 1}, _logs(SAVED_RESULT), 1, "198 of 200 requests completed"),
        ({"failed": 1}, "Traceback: connection refused", 1, "failed; the end of its log"),
        ({"succeeded": 1}, "no markers at all", 2, "no result"),
        ({"succeeded": 1}, _logs({**ALL_COMPLETED, "mean_ttft_ms": math.nan}), 2, "mean_ttft_ms"),
        ({"succeeded": "yes"}, _logs(ALL_COMPLETED), 2, "cannot read"),
        ({"active": 1}, _logs(ALL_COMPLETED), 2, "still running"),
    ],
    ids=[
        "all",
        "none",
        "some-lost",
        "job-failed",
        "no-result",
        "nan-figure",
        "bad-status",
        "never-ends",
    ],
)
def test_bench_exit_code_follows_what_the_run_completed(
    job_status, logs, code, fragment, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(bench_run, "POLL_SECONDS", 0.01)
    extra = ["--json"]
    if job_status.get("active"):
        extra += ["--timeout-minutes", "1"]
        monkeypatch.setattr(cluster_jobs, "CALL_SECONDS", 1.0)
        monkeypatch.setattr(bench_run, "CLOCK", _fast_clock())
    exit_code, stdout, stderr = _bench(cluster(job_status, logs), tmp_path, *extra)
    assert exit_code == code, stderr
    assert fragment in stdout + stderr
    if code == 0:
        assert json.loads(stdout)["check"]["ok"] is True


def _fast_clock():
    """A clock that runs a minute per read: the deadline passes after a few polls."""
    ticks = iter(range(0, 10_000, 60))
    return lambda: float(next(ticks))


def test_a_stalled_api_server_ends_within_the_call_bound(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(cluster_jobs, "CALL_SECONDS", 1.0)

    def stall(conn: Connection, request: Request) -> None:
        conn.trickle("HTTP/1.1 201 Created\r\n" + "X: " + "a" * 200, 0.2)

    routes = {**cluster({"succeeded": 1}, _logs(ALL_COMPLETED)), JOBS: stall}
    exit_code, _, stderr = _bench(routes, tmp_path)
    assert exit_code == 2
    assert "no complete answer within 1 s" in stderr


def test_an_api_server_that_refuses_the_caller_says_which_identity(tmp_path: Path) -> None:
    def forbidden(conn: Connection, request: Request) -> None:
        conn.respond_json({"kind": "Status", "code": 403, "reason": "Forbidden"}, "403 Forbidden")

    routes = {**cluster({"succeeded": 1}, ""), JOBS: forbidden}
    exit_code, _, stderr = _bench(routes, tmp_path)
    assert exit_code == 2
    assert "HTTP 403" in stderr
    assert "access entry" in stderr
