"""Where the deployed path's time to first token goes, from the real path's own clocks.

A request through the deployed application runs its parts one after the other: the ingress
hands it to decode's Serve replica, which calls prefill's replica (Serve's processing time there
holds prefill's engine), then gives decode's engine the returned KV coordinates (decode's engine
clock starts at its arrival and stops at its first token, the NIXL READ inside it), and the
first token leaves through Ray Serve LLM's stream batching and the ingress. So the clients' mean
TTFT less prefill's replica time and decode's engine TTFT is the part outside both engines.

Means, not percentiles: Serve's and vLLM's histograms give exact sums and counts but only
bucketed quantiles, and the sums add up part by part. Each page is one /metrics page saved at
the end of the variant's sweep (`python -m tools.gpu_bench metrics NAME`), so a mean covers every
request of that sweep, every concurrency of both datasets alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

# Ray Serve LLM 2.58 names a side's deployment "<Prefill|Decode>:<model id>"
# (serving_patterns/prefill_decode/builder.py); vLLM's series carry Ray's ray_ prefix under Serve.
PREFILL_DEPLOYMENT = "Prefill:"
SERVE_PROCESSING = "ray_serve_deployment_processing_latency_ms"
ENGINE = {
    "ttft": "ray_vllm_time_to_first_token_seconds",
    "queue": "ray_vllm_request_queue_time_seconds",
    "prefill": "ray_vllm_request_prefill_time_seconds",
    "nixl": "ray_vllm_nixl_xfer_time_seconds",
}


@dataclass(frozen=True)
class Mean:
    total: float
    count: float

    @property
    def value(self) -> float:
        return self.total / self.count if self.count else float("nan")


def mean_of(text: str, name: str, where: Callable[[dict[str, str]], bool] = lambda _: True) -> Mean:
    """A histogram's mean over every series of ``name`` the filter keeps."""
    sums = {f"{name}_sum": 0.0, f"{name}_count": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in sums and where(sample.labels):
                sums[sample.name] += sample.value
    return Mean(sums[f"{name}_sum"], sums[f"{name}_count"])


def client_mean_ttft_ms(points: Iterable[dict]) -> float:
    """The clients' mean TTFT over every completed request of the given points."""
    total = count = 0.0
    for point in points:
        total += point["mean_ttft_ms"] * point["completed"]
        count += point["completed"]
    return total / count


def deployed_parts(prefill_page: str, decode_page: str, client_ms: float) -> dict[str, float]:
    """The deployed path's mean TTFT in its parts, in ms (module docstring)."""
    prefill_replica = mean_of(
        prefill_page, SERVE_PROCESSING, lambda labels: labels.get("deployment", "").startswith(
            PREFILL_DEPLOYMENT
        )
    ).value  # fmt: skip
    seconds = {key: mean_of(prefill_page, name).value * 1000 for key, name in ENGINE.items()}
    decode = {key: mean_of(decode_page, name).value * 1000 for key, name in ENGINE.items()}
    return {
        "clients' TTFT": client_ms,
        "prefill's Serve replica": prefill_replica,
        "of it prefill's engine to its token": seconds["ttft"],
        "of that queued in prefill's engine": seconds["queue"],
        "of that prefill's forward pass": seconds["prefill"],
        "decode's engine to its first token": decode["ttft"],
        "of it queued in decode's engine": decode["queue"],
        "of it the NIXL READ": decode["nixl"],
        "outside both engines (ingress, Serve's hops, stream batching)": client_ms
        - prefill_replica
        - decode["ttft"],
    }


def for_run(result: Path, metrics: Path, variant: str = "deployed") -> dict[str, float]:
    """The parts of ``variant`` from a recorded run and the pages saved beside it."""
    run = json.loads(result.read_text())
    points = [p for dataset in run["points"][variant].values() for p in dataset.values()]
    return deployed_parts(
        (metrics / f"{variant}-ray-prefill.txt").read_text(),
        (metrics / f"{variant}-ray-decode.txt").read_text(),
        client_mean_ttft_ms(points),
    )


def table(parts: dict[str, float]) -> str:
    """The parts as the Markdown table docs/verification.md shows."""
    rows = ["| part | mean (ms) |", "|---|---|"]
    rows += [f"| {name} | {value:,.1f} |" for name, value in parts.items()]
    return "\n".join(rows)
