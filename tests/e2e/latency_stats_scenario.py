"""The latency policy's inputs on the deployed application: a RayService rendered with
`serving.scaling.policy: latency` (test_latency_policy.py renders it with the project's code) on
a local Ray of its own, streamed completions through the endpoint, and then, side by side:

- what each side's replicas report to Serve (their `record_autoscaling_stats()`, called
  through a Serve handle as Serve's replica would: serve_extensions/latency_servers.py);
- what the clients measured over the same window: time to first token, and each stream's
  mean inter-token latency, at the objective's percentile (latency_policy.percentile);
- what they report after a few answers that are not streamed (before the load), and while
  HELD of them, long ones, are in decode's engine (the engines' requests count every request,
  streamed or not: serve_extensions/latency_servers.py engine_requests);
- both sides' reports every 2 s under the load: the requests their engines hold;
- the reason of the policy's last decision per side, from its metric on the Ray nodes'
  metrics ports (`ray_pd_llm_scaling_reason`, exported by Serve's controller).

    python tests/e2e/latency_stats_scenario.py RAYSERVICE.json OUT.json

Writes what it saw as JSON. The load is bounded: `--clients` streams one after another, each
with a timeout, until each side's look-back window is full and both sides are decided on
latency, for at most `--seconds`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from harness import PROJECT_ROOT, LocalRay, http, rendered

sys.path.insert(0, str(PROJECT_ROOT))

# Pure Python: no Ray import.
from serve_extensions.latency_autoscaler import ENGINE_REQUESTS_METRIC
from serve_extensions.latency_policy import AWAITING, QUEUE

RUN_DIR = Path(os.environ.get("PD_E2E_RUN_DIR", PROJECT_ROOT / "build" / "e2e")) / "latency-stats"
DEPLOY_TIMEOUT_S = 420.0
STREAM_TIMEOUT_S = 60.0
# The stand-in's cost, set for the whole local cluster: each output token takes TOKEN_DELAY_S
# on decode; prefill takes the harness's PREFILL_S_PER_PROMPT_TOKEN per prompt word, so a
# PROMPT_WORDS prompt holds prefill long enough (0.8 s) that its TTFT is most of the client's
# (what the client adds does not grow with it: 0.1-0.2 s on this two-core machine, 0.7 s with
# both cores busy elsewhere).
TOKEN_DELAY_S = 0.02
PROMPT_WORDS = 4000
ANSWER_TOKENS = 40
SIDES = {"prefill": "Prefill:", "decode": "Decode:"}
NON_STREAMED = 4  # completions without streaming, before the load
# Whole answers sent together and read while decode generates them: HELD_TOKENS at
# TOKEN_DELAY_S each is 8 s. Their prompts are a few words: prefill's part is Serve's routing,
# a fraction of a second, longer on a loaded machine; so the reports are read every
# HELD_POLL_S from HELD_FIRST_READ_S until decode's engine holds all of them, and at the
# latest HELD_LAST_READ_S in, well before the answers end (a read takes up to a second).
HELD = 3
HELD_TOKENS = 400
HELD_FIRST_READ_S = 1.0
HELD_POLL_S = 0.5
HELD_LAST_READ_S = 5.0
REASON_METRIC = "ray_pd_llm_scaling_reason"


def stream_once(base_url: str, model: str, prompt: str) -> dict[str, Any] | None:
    """One streamed completion; its TTFT and mean inter-token latency as the client sees them
    (token arrivals are the server-sent events that carry text: Ray batches them, so several
    may arrive at once), None if it failed."""
    body = {"model": model, "prompt": prompt, "max_tokens": ANSWER_TOKENS, "stream": True}
    request = urllib.request.Request(
        f"{base_url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    start = time.monotonic()
    arrivals: list[float] = []
    try:
        with urllib.request.urlopen(request, timeout=STREAM_TIMEOUT_S) as response:
            for line in response:
                text = line.decode().strip()
                if text.startswith("data: {") and '"text":"' in text and '"text":""' not in text:
                    arrivals.append(time.monotonic())
    except OSError:
        return None
    if len(arrivals) < 2:
        return None
    return {
        "end": time.monotonic(),
        "ttft_s": arrivals[0] - start,
        "itl_s": (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1),
        "tokens": len(arrivals),
    }


class Load:
    """`clients` threads, each streaming one completion after another until stopped."""

    def __init__(self, base_url: str, model: str, clients: int) -> None:
        self.seen: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._args = (base_url, model)
        self._threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)
        ]

    def _client(self, index: int) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            # A prompt of its own per request (no prefix shared across requests).
            prompt = " ".join([f"c{index}r{n}"] + ["word"] * (PROMPT_WORDS - 1))
            outcome = stream_once(*self._args, prompt)
            with self._lock:
                self.seen.append(outcome or {"end": time.monotonic(), "failed": True})

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=STREAM_TIMEOUT_S + 5)
        with self._lock:
            return list(self.seen)


def replica_reports(cluster: LocalRay) -> dict[str, Any]:
    """Each side's `record_autoscaling_stats()` as its (one) replica answers it now; the error
    where it has none (Ray's own servers)."""
    from ray import serve

    deployments = cluster.applications()[cluster.app_name]["deployments"]
    reports: dict[str, Any] = {}
    for side, prefix in SIDES.items():
        (name,) = [d for d in deployments if d.startswith(prefix)]
        handle = serve.get_deployment_handle(name, app_name=cluster.app_name)
        try:
            reports[side] = handle.record_autoscaling_stats.remote().result(timeout_s=30)
        except Exception as problem:
            reports[side] = {"error": f"{type(problem).__name__}: {problem}"[:500]}
    return reports


def reports_while_held(cluster: LocalRay, model: str) -> dict[str, Any]:
    """HELD whole (not streamed) answers sent at once, both sides' reports read while decode's
    engine generates them, and their statuses."""
    statuses: list[int] = []

    def send(n: int) -> None:
        body = {"model": model, "prompt": f"held {n}", "max_tokens": HELD_TOKENS}
        status, _ = http(
            "POST", f"{cluster.base_url}/v1/completions", body, timeout=STREAM_TIMEOUT_S
        )
        statuses.append(status)

    threads = [threading.Thread(target=send, args=(n,), daemon=True) for n in range(HELD)]
    sent = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(HELD_FIRST_READ_S)
    while True:
        reports = replica_reports(cluster)
        in_decode = reports["decode"].get(ENGINE_REQUESTS_METRIC)
        if in_decode == HELD or time.monotonic() - sent >= HELD_LAST_READ_S:
            break
        time.sleep(HELD_POLL_S)
    read_at_s = time.monotonic() - sent
    for thread in threads:
        thread.join(timeout=STREAM_TIMEOUT_S + 5)
    return {"statuses": statuses, "reports": reports, "read_at_s": round(read_at_s, 2)}


def policy_reasons(cluster: LocalRay) -> dict[str, str]:
    """The reason whose series is 1 per side, from every Ray node's metrics port."""
    from prometheus_client.parser import text_string_to_metric_families

    reasons: dict[str, str] = {}
    for node in cluster.nodes:
        status, text = http("GET", f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=10)
        if status != 200:
            continue
        for family in text_string_to_metric_families(text):
            if family.name != REASON_METRIC:
                continue
            for sample in family.samples:
                if sample.value == 1.0 and sample.labels.get("application") == cluster.app_name:
                    reasons[sample.labels["side"]] = sample.labels["reason"]
    return reasons


def look_back_s(application: dict[str, Any]) -> dict[str, float]:
    """Each side's look-back window, as Serve has it (Ray's default where the config sets none):
    the window its replicas report over."""
    from ray.serve.config import AutoscalingConfig

    default = AutoscalingConfig.model_fields["look_back_period_s"].default
    windows = {}
    for side in SIDES:
        config = application["args"][f"{side}_config"]["deployment_config"]["autoscaling_config"]
        windows[side] = float(config.get("look_back_period_s") or default)
    return windows


def push_interval_s() -> float:
    """How often a replica pushes its autoscaling report to the controller (Ray 2.58
    serve/_private/constants.py RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S, 10 s)."""
    from ray.serve._private.constants import RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S

    return RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S


def decided_on_latency(reasons: dict[str, str]) -> bool:
    """Both sides decided on their reported latency: neither the queue fallback nor the hold
    while samples are missing."""
    return set(reasons) == set(SIDES) and not {QUEUE, AWAITING} & set(reasons.values())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("rayservice", type=Path, help="the rendered RayService, as JSON")
    parser.add_argument("out", type=Path)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=70.0)
    options = parser.parse_args(argv)
    cluster = LocalRay(
        rendered(options.rayservice),
        RUN_DIR,
        extra_env={"STANDIN_TOKEN_DELAY_S": str(TOKEN_DELAY_S)},
    )
    result: dict[str, Any] = {}
    try:
        cluster.start()
        cluster.deploy(cluster.config, timeout=DEPLOY_TIMEOUT_S)
        application = cluster.config["applications"][0]
        model = application["args"]["decode_config"]["model_loading_config"]["model_id"]
        result["import_path"] = application["import_path"]
        result["objectives"] = application["autoscaling_policy"]["policy_kwargs"]["objectives"]
        result["look_back_s"] = look_back_s(application)
        result["clients"] = options.clients
        result["reasons_before_load"] = policy_reasons(cluster)
        # Answers that are not streamed: prefill times each, decode has no token gaps to time.
        sent = [
            http(
                "POST",
                f"{cluster.base_url}/v1/completions",
                {"model": model, "prompt": f"whole answer {n}", "max_tokens": 8},
                timeout=STREAM_TIMEOUT_S,
            )[0]
            for n in range(NON_STREAMED)
        ]
        result["non_streamed"] = {"statuses": sent, "reports": replica_reports(cluster)}
        result["non_streamed_held"] = reports_while_held(cluster, model)
        # The policy decides every control loop on what the controller last received (replicas
        # record every look_back_period_s x 0.2 and push every 10 s): its reasons are read
        # while the load runs, and the replicas' reports at its end, windows full. The load
        # lasts until every side's window is full (its look-back and one push) and both sides
        # are decided on latency, and at most --seconds.
        full_after_s = max(result["look_back_s"].values()) + push_interval_s()
        load = Load(cluster.base_url, model, options.clients)
        started = time.monotonic()
        load.start()
        timeline, under_load = [], []
        while time.monotonic() - started < options.seconds:
            time.sleep(2)
            timeline.append([round(time.monotonic() - started, 1), policy_reasons(cluster)])
            under_load.append(replica_reports(cluster))
            if timeline[-1][0] >= full_after_s and decided_on_latency(timeline[-1][1]):
                break
        result["replica_reports"] = replica_reports(cluster)
        result["reported_at"] = time.monotonic()
        result["reasons_during_load"] = timeline
        result["reports_during_load"] = under_load
        result["requests"] = load.stop()
    finally:
        cluster.stop()
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
