"""The processes under test, started detached so that they outlive the device call that started
them (the GPU machine keeps processes of a new session between calls): two vLLM engines and the
toy proxy (direct, aggregated), or a local Ray cluster with the Serve application (deployed).

Each process's id is written to the state folder; ``stop`` ends exactly those process groups.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app_config.node_labels import GPU_ROLES
from tools.gpu_check.engines import HTTP_PORTS, engine_command
from tools.gpu_check.one_gpu import LOOPBACK
from tools.gpu_check.serve_app import WORKER_CPUS, LocalCluster, with_serve_extensions

START_TIMEOUT_S = 540.0
# Where a benchmark's plan, record and logs live on the GPU machine, between its device calls.
STATE = Path(os.environ.get("GPU_BENCH_STATE", Path.home() / "gpu-bench"))
# The Serve application's HTTP port on the local Ray.
HTTP_PORT = 8400
# Every process under test. The benchmarks run the deployed kernels: unlike gpu-check they do
# not set VLLM_BATCH_INVARIANT (answers are not compared, and batch-invariant kernels are slower).
ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}
PROXY_PORT = 8300
RAY_PORTS = {"gcs": 6380, "dashboard": 8266, "head": 8081, "prefill": 8082, "decode": 8083}
# A side's further Ray nodes (several replicas of one side on the one GPU): metrics ports from here.
EXTRA_NODE_PORTS = 8090


def node_names(role: str, count: int) -> list[str]:
    """The Ray nodes that host ``role``'s replicas: ``prefill``, then ``prefill-2``, ..."""
    return [role if index == 0 else f"{role}-{index + 1}" for index in range(count)]


def metrics_port(node: str) -> int:
    """A Ray node's metrics export port: the fixed one of the first node of each side, then one
    per further node."""
    if node in RAY_PORTS:
        return RAY_PORTS[node]
    role, _, number = node.rpartition("-")
    return EXTRA_NODE_PORTS + GPU_ROLES.index(role) * 10 + int(number)


def _detached(command: list[str], env: Mapping[str, str], log: Path, pids: Path) -> int:
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )
    with open(pids, "a") as record:
        record.write(f"{process.pid}\n")
    return process.pid


def wait_healthy(url: str, log: Path, pid: int, timeout: float = START_TIMEOUT_S) -> float:
    start = time.monotonic()
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return time.monotonic() - start
        except OSError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{log.name}: the process exited:\n{tail}") from None
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{url} not healthy in {timeout:.0f} s")
        time.sleep(2)


def start_engines(
    model_path: str,
    model_id: str,
    kwargs_by_role: Mapping[str, Mapping[str, Any]],
    env: Mapping[str, str],
    state: Path,
) -> dict[str, float]:
    """Prefill first, then decode: two engines profiling memory at once on one GPU can fail
    (../shared/GPU.md). Returns each engine's seconds to healthy."""
    seconds = {}
    for role in GPU_ROLES:
        command, role_env = engine_command(role, model_path, model_id, kwargs_by_role[role], env)
        log = state / f"{role}.log"
        pid = _detached(command, role_env, log, state / "pids")
        seconds[role] = wait_healthy(f"{engine_url(role)}/health", log, pid)
        print(f"gpu-bench: {role} engine healthy in {seconds[role]:.0f} s", flush=True)
    pid = _detached(
        [
            sys.executable,
            "-m",
            "tools.gpu_bench.proxy",
            "--port",
            str(PROXY_PORT),
            "--prefill",
            engine_url("prefill"),
            "--decode",
            engine_url("decode"),
        ],
        env,
        state / "proxy.log",
        state / "pids",
    )
    wait_healthy(f"{proxy_url()}/health", state / "proxy.log", pid, timeout=60)
    return seconds


def direct_pids(state: Path) -> dict[str, list[int]]:
    """The direct path's processes by part, as start_engines started them (one per line of
    its pids file: each side's engine, whose API server is the process itself, then the
    proxy), so that their CPU reads as the Serve application's does."""
    parts = (*GPU_ROLES, "proxy")
    pids = [int(line) for line in (state / "pids").read_text().split()][-len(parts) :]
    return {part: [pid] for part, pid in zip(parts, pids, strict=False)}


def engine_url(role: str) -> str:
    return f"http://{LOOPBACK}:{HTTP_PORTS[role]}"


def proxy_url() -> str:
    return f"http://{LOOPBACK}:{PROXY_PORT}"


def stop(state: Path) -> None:
    """End the process groups this tool started (and only those), then Ray's own."""
    pids = state / "pids"
    if pids.exists():
        for line in pids.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(line), signal.SIGTERM)
        time.sleep(10)
        for line in pids.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(line), signal.SIGKILL)
        pids.unlink()


def start_ray(
    head_params: Mapping[str, str],
    worker_resources: Mapping[str, Mapping[str, float]],
    env: Mapping[str, str],
    state: Path,
    node_env: Mapping[str, Mapping[str, str]],
    nodes_per_role: Mapping[str, int] | None = None,
) -> LocalCluster:
    """A head (the head group's CPUs, no GPU) and one node per side with the GPU and the side's
    resource, as `make gpu-check` shapes it (tools/gpu_check/serve_app.py). ``node_env`` adds
    environment to one node, by its name (Ray's workers inherit their raylet's).
    ``nodes_per_role`` starts several nodes of a side, one per replica (``node_names``): each
    gets GPU 0 and one replica's share of the side's resource."""
    ray = [sys.executable, "-m", "ray.scripts.scripts", "start"]
    process_env = with_serve_extensions({**os.environ, **env})

    def start(name: str, args: list[str]) -> None:
        with open(state / f"ray-start-{name}.log", "wb") as out:
            subprocess.run(
                [*ray, *args],
                check=True,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**process_env, **node_env.get(name, {})},
                timeout=180,
                start_new_session=True,
            )

    start(
        "head",
        [
            "--head",
            f"--node-ip-address={LOOPBACK}",
            f"--port={RAY_PORTS['gcs']}",
            f"--num-cpus={head_params.get('num-cpus', '0')}",
            "--num-gpus=0",
            f"--dashboard-host={LOOPBACK}",
            f"--dashboard-port={RAY_PORTS['dashboard']}",
            f"--metrics-export-port={RAY_PORTS['head']}",
            "--disable-usage-stats",
        ],
    )
    for role in GPU_ROLES:
        for node in node_names(role, (nodes_per_role or {}).get(role, 1)):
            start(
                node,
                [
                    f"--address={LOOPBACK}:{RAY_PORTS['gcs']}",
                    f"--node-ip-address={LOOPBACK}",
                    f"--num-cpus={WORKER_CPUS}",
                    "--num-gpus=1",
                    f"--resources={json.dumps(dict(worker_resources[role]))}",
                    f"--metrics-export-port={metrics_port(node)}",
                ],
            )
    return cluster()


def cluster() -> LocalCluster:
    return LocalCluster(
        f"http://{LOOPBACK}:{RAY_PORTS['dashboard']}",
        {node: RAY_PORTS[node] for node in ("head", *GPU_ROLES)},
    )


def stop_ray(env: Mapping[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"],
        env={**os.environ, **env},
        capture_output=True,
        timeout=120,
    )


def applications(cluster: LocalCluster) -> dict[str, Any]:
    with urllib.request.urlopen(f"{cluster.dashboard}/api/serve/applications/", timeout=30) as a:
        return json.loads(a.read()).get("applications", {})


def replace_applications(cluster: LocalCluster, config: Mapping[str, Any]) -> None:
    """PUT ``config`` after deleting whatever Serve runs: a PUT over a running application
    would report its old RUNNING state for a moment, and the engines of both would not fit the
    GPU together."""
    if applications(cluster):
        request = urllib.request.Request(
            f"{cluster.dashboard}/api/serve/applications/", method="DELETE"
        )
        urllib.request.urlopen(request, timeout=60).close()
        deadline = time.monotonic() + 300
        while applications(cluster) and time.monotonic() < deadline:
            time.sleep(3)
    cluster.put(config)


def deployments(cluster: LocalCluster, app: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{cluster.dashboard}/api/serve/applications/", timeout=30) as a:
        status = json.loads(a.read())["applications"][app]
    return status.get("deployments", {})


def ingress_name(cluster: LocalCluster, app: str) -> str:
    """The application's ingress deployment: the one that is neither side's server."""
    (name,) = [
        name
        for name in deployments(cluster, app)
        if not name.startswith(("Prefill:", "Decode:", "Prefill", "Decode"))
    ]
    return name
