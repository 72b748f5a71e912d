"""Lifecycle scenarios on a Ray cluster of their own (one per process: `LocalRay` refuses a
second `import ray`, and a scenario that kills the head must not take the test session's
driver with it). test_lifecycle.py runs each with the e2e venv's Python and reads the JSON it
writes:

    python tests/e2e/lifecycle_scenarios.py SCENARIO OUT.json [options]

Scenarios (two cluster starts cover four promises; the machine is small and shared):
  zero-then-head-loss      prefill at min_replicas 0: the application turns RUNNING with no
                           prefill replica and a first request wakes one; then a long stream
                           through a worker's proxy while the head's processes are killed
  capacity-then-head-loss  a new Ray cluster whose prefill pod waits for capacity: decode
                           starts anyway, the application waits (never DEPLOY_FAILED) and turns
                           RUNNING once a prefill node arrives; then the same stream and kill
--reconnect-s is the worker raylets' RAY_gcs_rpc_server_reconnect_timeout_s.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from harness import PROJECT_ROOT, LocalRay, Synthesized, free_port, wait_for

CDK_OUT = Path(os.environ.get("PD_E2E_CDK_OUT", PROJECT_ROOT / "cdk.out"))
RUN_DIR = Path(os.environ.get("PD_E2E_RUN_DIR", PROJECT_ROOT / "build" / "e2e")) / "lifecycle"
GCS_RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
# Ray Serve 2.58: a worker node's proxy binds this port instead of http_options.port (the head
# is exempt), so the test can reach a worker's proxy the way the load balancer does.
WORKER_PROXY_PORT_ENV = "RAY_SERVE_WORKER_PROXY_HTTP_PORT"
WAKE_TIMEOUT_S = 240.0
DEPLOY_TIMEOUT_S = 420.0


def engine_starts(cluster: LocalRay, role: str) -> int:
    return len([r for r in cluster.records() if r["event"] == "start" and r["role"] == role])


def deployment_statuses(cluster: LocalRay) -> dict[str, str]:
    app = cluster.applications().get(cluster.app_name, {})
    return {name: d["status"] for name, d in app.get("deployments", {}).items()}


def side_status(statuses: dict[str, str], side: str) -> str | None:
    prefix = "Prefill:" if side == "prefill" else "Decode:"
    found = [status for name, status in statuses.items() if name.startswith(prefix)]
    return found[0] if found else None


def model_id(cluster: LocalRay) -> str:
    args = cluster.config["applications"][0]["args"]
    return args["decode_config"]["model_loading_config"]["model_id"]


def stream(
    port: int, model: str, max_tokens: int, on_token: Any = None, timeout: float = 600.0
) -> dict[str, Any]:
    """One streamed chat completion; what arrived and how it ended."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    tokens, finish, error, last_at = 0, None, None, None
    try:
        connection.request(
            "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        if response.status != 200:
            return {"tokens": 0, "finish": None, "error": f"HTTP {response.status}"}
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            if "error" in chunk:
                error = json.dumps(chunk["error"])[:500]
                break
            for choice in chunk.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    tokens += 1
                    last_at = time.monotonic()
                    if on_token:
                        on_token(tokens)
                finish = choice.get("finish_reason") or finish
    except (OSError, http.client.HTTPException, ValueError) as cut:
        error = repr(cut)
    finally:
        connection.close()
    return {"tokens": tokens, "finish": finish, "error": error, "last_token_at": last_at}


def local_ray(synthesized: Synthesized, name: str, options: argparse.Namespace, **kwargs: Any):
    """A cluster whose worker raylets give the GCS ``options.reconnect_s`` and whose worker
    proxies listen on a port of their own."""
    worker_port = free_port()
    env = {
        GCS_RECONNECT_ENV: str(options.reconnect_s),
        WORKER_PROXY_PORT_ENV: str(worker_port),
        "STANDIN_TOKEN_DELAY_S": str(options.token_delay_s),
    }
    cluster = LocalRay(synthesized, RUN_DIR / name, extra_env=env, **kwargs)
    return cluster, worker_port


def first_request(cluster: LocalRay) -> dict[str, Any]:
    sent = time.monotonic()
    answer = stream(cluster.http_port, model_id(cluster), 8, timeout=WAKE_TIMEOUT_S)
    answer.pop("last_token_at", None)
    return {**answer, "seconds": round(time.monotonic() - sent, 1)}


def stream_while_the_head_dies(
    cluster: LocalRay, worker_port: int, options: argparse.Namespace
) -> dict[str, Any]:
    """A long stream through a worker's proxy (as the load balancer sends it); the head's
    processes are killed once it has started."""
    model = model_id(cluster)
    killed_at: list[float] = []

    def kill_once_streaming(tokens: int) -> None:
        if tokens == options.kill_after_tokens and not killed_at:
            cluster.kill_head()
            killed_at.append(time.monotonic())

    # Both workers' proxies share the port (SO_REUSEPORT); either path stays on workers.
    wait_for(
        lambda: stream(worker_port, model, 1, timeout=30)["tokens"] == 1,
        60,
        1.0,
        "an answer from a worker's proxy",
    )
    started = time.monotonic()
    result = stream(worker_port, model, options.tokens, kill_once_streaming)
    ended = result.pop("last_token_at", None) or started
    return {
        **result,
        "reconnect_s": options.reconnect_s,
        "wanted_tokens": options.tokens,
        "stream_s": round(ended - started, 1),
        "head_killed": bool(killed_at),
        "streamed_after_head_killed_s": round(ended - killed_at[0], 1) if killed_at else None,
    }


def zero_then_head_loss(synthesized: Synthesized, options: argparse.Namespace) -> dict[str, Any]:
    """Prefill at min_replicas 0 wakes on the first request; then the head dies mid-stream."""
    cluster, worker_port = local_ray(synthesized, "zero-then-head-loss", options)
    try:
        cluster.start()
        config = copy.deepcopy(cluster.config)
        # What `serving.prefill.min_replicas: 0` renders (serve_config.py copies it into the
        # side's autoscaling_config); nothing else changes.
        prefill = config["applications"][0]["args"]["prefill_config"]
        prefill["deployment_config"]["autoscaling_config"]["min_replicas"] = 0
        cluster.config = config
        start = time.monotonic()
        cluster.deploy(config, DEPLOY_TIMEOUT_S)
        result: dict[str, Any] = {
            "running_after_s": round(time.monotonic() - start, 1),
            "prefill_engines_when_running": engine_starts(cluster, "prefill"),
            "decode_engines_when_running": engine_starts(cluster, "decode"),
            "first_request": first_request(cluster),
            "prefill_engines_after": engine_starts(cluster, "prefill"),
        }
        result["head_loss"] = stream_while_the_head_dies(cluster, worker_port, options)
        return result
    finally:
        cluster.stop()


def capacity_then_head_loss(
    synthesized: Synthesized, options: argparse.Namespace
) -> dict[str, Any]:
    """A new Ray cluster whose prefill pod waits for capacity; then the head dies mid-stream."""
    cluster, worker_port = local_ray(
        synthesized, "capacity-then-head-loss", options, absent_groups=("prefill",)
    )
    try:
        cluster.start()
        cluster.put(cluster.config)
        start = time.monotonic()
        seen: set[tuple[str | None, str | None, str | None]] = set()
        # At least --wait-s, and until decode's engine has started (a busy machine builds the
        # application slowly), within the deploy bound.
        while time.monotonic() - start < DEPLOY_TIMEOUT_S and (
            time.monotonic() - start < options.wait_s or not engine_starts(cluster, "decode")
        ):
            status = cluster.applications().get(cluster.app_name, {}).get("status")
            statuses = deployment_statuses(cluster)
            seen.add((status, side_status(statuses, "decode"), side_status(statuses, "prefill")))
            time.sleep(2.0)
        arrived = time.monotonic()
        decode_engines = engine_starts(cluster, "decode")
        cluster.add_worker("prefill")
        cluster.wait_status(cluster.app_name, "RUNNING", DEPLOY_TIMEOUT_S)
        result: dict[str, Any] = {
            "waited_s": round(arrived - start, 1),
            "seen_while_waiting": sorted([list(item) for item in seen], key=str),
            "decode_engines_while_waiting": decode_engines,
            "running_after_capacity_s": round(time.monotonic() - arrived, 1),
            "first_request": first_request(cluster),
        }
        result["head_loss"] = stream_while_the_head_dies(cluster, worker_port, options)
        return result
    finally:
        cluster.stop()


SCENARIOS = {
    "zero-then-head-loss": zero_then_head_loss,
    "capacity-then-head-loss": capacity_then_head_loss,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("out", type=Path)
    parser.add_argument("--wait-s", type=float, default=45.0)
    parser.add_argument("--reconnect-s", type=int, default=60)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--token-delay-s", type=float, default=0.5)
    parser.add_argument("--kill-after-tokens", type=int, default=5)
    options = parser.parse_args(argv)
    synthesized = Synthesized.read(CDK_OUT)
    result = SCENARIOS[options.scenario](synthesized, options)
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
