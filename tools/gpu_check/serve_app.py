"""Stage 2: the whole Serve application (`build_pd_openai_app` with the synthesized args) on a
local Ray shaped like KubeRay's, deployed as KubeRay deploys it.

The cluster: a head with the head group's rayStartParams (no GPU), and one Ray node per side
with one GPU and the side's custom resource, as the worker groups advertise it. Several Ray nodes
on one machine each get GPU 0, so prefill and decode share the GPU. The config goes in
with ``PUT /api/serve/applications/`` on the dashboard (KubeRay 1.7's serveConfigV2 path).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app_config.node_labels import GPU_ROLES
from catalog.metrics import SCRAPED
from pdctl.checks import Check
from tools.gpu_check.one_gpu import LOOPBACK

RUNNING_TIMEOUT_S = 540.0
METRICS_WAIT_S = 60.0
WORKER_CPUS = 8
# Ray's autoscaler sidecar exports these on its own port; there is none on a local cluster.
_NOT_LOCAL = {"autoscaler_pending_nodes", "autoscaler_active_nodes"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@dataclass
class LocalCluster:
    dashboard: str
    metrics_ports: dict[str, int]  # by node: head, prefill, decode

    def metrics(self, node: str) -> str:
        url = f"http://{LOOPBACK}:{self.metrics_ports[node]}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read().decode()

    def put(self, config: Mapping[str, Any]) -> None:
        request = urllib.request.Request(
            f"{self.dashboard}/api/serve/applications/",
            data=json.dumps(config).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=60).close()

    def wait_running(self, app: str, log: Path) -> float:
        start = time.monotonic()
        status: dict[str, Any] = {}
        while time.monotonic() - start < RUNNING_TIMEOUT_S:
            try:
                url = f"{self.dashboard}/api/serve/applications/"
                with urllib.request.urlopen(url, timeout=30) as answer:
                    status = json.loads(answer.read()).get("applications", {}).get(app, {})
            except (OSError, ValueError):  # the dashboard answers 503 while the GCS recovers
                time.sleep(5)
                continue
            if status.get("status") == "RUNNING":
                return time.monotonic() - start
            if status.get("status") in ("DEPLOY_FAILED", "UNHEALTHY"):
                break
            time.sleep(5)
        log.write_text(json.dumps(status, indent=2))
        raise RuntimeError(f"application {app}: {status.get('status')}: {status.get('message')}")


# The app's own Serve code (serve_extensions/, which the synthesized Serve config's router names):
# on the pods a ConfigMap on PYTHONPATH (serving_manifests/serve_extensions.py); here the
# checkout's copy, first on every local Ray process's path.
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


def with_serve_extensions(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the project root in front of PYTHONPATH (the caller's entries kept)."""
    paths = (str(PROJECT_ROOT), env.get("PYTHONPATH", ""))
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


@contextmanager
def local_ray(
    head_params: Mapping[str, str],
    worker_resources: Mapping[str, Mapping[str, float]],
    env: Mapping[str, str],
    logs: Path,
) -> Iterator[LocalCluster]:
    ray = [sys.executable, "-m", "ray.scripts.scripts"]
    process_env = with_serve_extensions(
        {**os.environ, **env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    )
    gcs, dashboard_port = free_port(), free_port()
    ports = {"head": free_port(), **{role: free_port() for role in GPU_ROLES}}

    def start(name: str, args: list[str]) -> None:
        with open(logs / f"ray-start-{name}.log", "wb") as out:
            subprocess.run(
                [*ray, "start", *args],
                check=True,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=process_env,
                timeout=180,
            )

    try:
        start(
            "head",
            [
                "--head",
                f"--node-ip-address={LOOPBACK}",
                f"--port={gcs}",
                f"--num-cpus={head_params.get('num-cpus', '0')}",
                "--num-gpus=0",
                f"--dashboard-host={LOOPBACK}",
                f"--dashboard-port={dashboard_port}",
                f"--metrics-export-port={ports['head']}",
                "--disable-usage-stats",
            ],
        )
        for role in GPU_ROLES:
            start(
                role,
                [
                    f"--address={LOOPBACK}:{gcs}",
                    f"--node-ip-address={LOOPBACK}",
                    f"--num-cpus={WORKER_CPUS}",
                    "--num-gpus=1",
                    f"--resources={json.dumps(dict(worker_resources[role]))}",
                    f"--metrics-export-port={ports[role]}",
                ],
            )
        yield LocalCluster(f"http://{LOOPBACK}:{dashboard_port}", ports)
    finally:
        subprocess.run([*ray, "stop", "--force"], env=process_env, capture_output=True, timeout=120)


def one_gpu_worker_resources(
    deployed: Mapping[str, Mapping[str, float]],
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """A side's resource, one unit per GPU as the worker group advertises it, for a one-GPU node."""
    local = {role: {key: 1.0 for key in resources} for role, resources in deployed.items()}
    changes = [
        f"{role} worker resources: {dict(deployed[role])} -> {local[role]} (one GPU per node)"
        for role in deployed
        if dict(deployed[role]) != local[role]
    ]
    return local, changes


def metric_presence(texts: Iterable[str]) -> dict[str, str]:
    """Each metric the dashboard and alerts read: present, or why it is absent (Ray exports a
    counter only after its first increment)."""
    from prometheus_client.parser import text_string_to_metric_families

    names = set()
    for text in texts:
        for family in text_string_to_metric_families(text):
            names.update(sample.name for sample in family.samples)
    presence = {}
    for metric in SCRAPED:
        if metric.name in _NOT_LOCAL:
            presence[metric.name] = "not local (the KubeRay autoscaler sidecar's port)"
        elif any(name in names for name in metric.exposed_names()):
            presence[metric.name] = "present"
        elif metric.kind == "counter":
            presence[metric.name] = "absent until its first increment (none failed)"
        else:
            presence[metric.name] = "absent"
    return presence


def run(
    serve_config: Mapping[str, Any],
    head_params: Mapping[str, str],
    worker_resources: Mapping[str, Mapping[str, float]],
    env: Mapping[str, str],
    local_answers: Mapping[str, str],
    chat_answers: Mapping[str, str],
    logs: Path,
    *,
    tolerance: float,
    backend: str,
) -> tuple[list[Check], dict[str, str]]:
    from openai import OpenAI

    from pdctl.verify import (
        METRICS_REPORT_INTERVAL_SECONDS,
        await_transfers,
        kv_verdict,
        reported_after,
        transfer_evidence,
    )
    from tools.gpu_check.engines import ANSWER_TOKENS, agreement

    (application,) = serve_config["applications"]
    model_id = application["args"]["decode_config"]["model_loading_config"]["model_id"]
    base = f"http://{LOOPBACK}:{serve_config['http_options']['port']}/v1"
    checks: list[Check] = []
    with local_ray(head_params, worker_resources, env, logs) as cluster:
        cluster.put(serve_config)
        seconds = cluster.wait_running(application["name"], logs / "serve-status.json")
        checks.append(
            Check(
                "Serve application RUNNING after PUT /api/serve/applications/",
                True,
                f"{seconds:.0f} s",
            )
        )
        client = OpenAI(base_url=base, api_key="unused", timeout=120, max_retries=0)
        # A series not yet incremented counts from zero (pdctl verify's rule): decode hands off
        # nothing before the first request (no start-up pre-warm, serve-pd-app.yaml).
        before = transfer_evidence([cluster.metrics("decode")])
        extra = {"ignore_eos": True}
        completions = {
            prompt: client.completions.create(
                model=model_id,
                prompt=prompt,
                max_tokens=ANSWER_TOKENS,
                temperature=0,
                extra_body=extra,
            )
            .choices[0]
            .text
            for prompt in local_answers
        }
        checks.append(
            agreement(
                "OpenAI completions through Serve equal the local answers",
                completions,
                local_answers,
                tolerance,
            )
        )
        chats = {
            text: client.chat.completions.create(
                model=model_id,
                messages=[{"role": "user", "content": text}],
                max_tokens=ANSWER_TOKENS,
                temperature=0,
                extra_body=extra,
            )
            .choices[0]
            .message.content
            or ""
            for text in chat_answers
        }
        checks.append(
            agreement(
                "OpenAI chat completions through Serve equal the local answers",
                chats,
                chat_answers,
                tolerance,
            )
        )
        streamed, finished = {}, True
        for prompt in list(local_answers)[:3]:
            pieces, reason = [], None
            for chunk in client.completions.create(
                model=model_id,
                prompt=prompt,
                max_tokens=ANSWER_TOKENS,
                temperature=0,
                extra_body=extra,
                stream=True,
            ):
                if chunk.choices:
                    pieces.append(chunk.choices[0].text)
                    reason = chunk.choices[0].finish_reason or reason
            streamed[prompt] = "".join(pieces)
            finished &= reason == "length"
        stream_check = agreement(
            "streamed completions equal the local answers",
            streamed,
            {p: local_answers[p] for p in streamed},
            tolerance,
        )
        checks.append(
            Check(
                stream_check.name,
                stream_check.ok and finished,
                f"{stream_check.detail}; every stream ended with finish_reason "
                f"{'length' if finished else 'missing'}",
            )
        )

        # Ray exports at its report interval (10 s by default): wait until decode's counters show
        # the transfers of the requests above, as pdctl verify does.
        during = await_transfers(
            lambda: transfer_evidence([cluster.metrics("decode")]),
            before,
            METRICS_WAIT_S,
            reported_after(time.monotonic(), METRICS_REPORT_INTERVAL_SECONDS),
        )
        # Each node's series appear at its workers' next report: read until all are there.
        deadline = time.monotonic() + METRICS_WAIT_S
        while True:
            texts = {node: cluster.metrics(node) for node in cluster.metrics_ports}
            presence = metric_presence(texts.values())
            if "absent" not in presence.values() or time.monotonic() > deadline:
                break
            time.sleep(2)
        for node, text in texts.items():
            (logs / f"metrics-{node}.txt").write_text(text)
        missing = [name for name, state in presence.items() if state == "absent"]
        unverified = [name for name, state in presence.items() if state.startswith("absent ")]
        checks.append(
            Check(
                "the metrics the dashboard and alerts read are exported",
                not missing,
                "missing: " + ", ".join(missing)
                if missing
                else f"{sum(s == 'present' for s in presence.values())} present; not yet "
                f"exported (a counter appears at its first increment): {', '.join(unverified)}",
            )
        )
        verdict = kv_verdict(during, backend)
        checks.append(
            Check(
                f"pdctl verify's reading of decode's metrics: {verdict.name}",
                verdict.ok,
                verdict.detail,
            )
        )
    return checks, presence
