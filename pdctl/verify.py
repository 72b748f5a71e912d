"""After deploy: does the endpoint answer, and did the KV cache really cross from prefill to
decode through NIXL? Evidence from the decode workers' Prometheus metrics:
vllm:nixl_xfer_time_seconds_count > 0 and vllm:nixl_num_failed_transfers == 0. EFA's RDMA write
counters stay at zero by design with the pull connector, so they prove nothing.
"""

from __future__ import annotations

import itertools
import statistics
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from catalog.metrics import NIXL_FAILED_TRANSFERS, NIXL_TRANSFER_TIME
from pdctl.checks import Check, failed, passed

# vLLM's names without the "vllm:" or "ray_vllm_" in front (catalog/metrics.py has the names
# Ray exports); all spellings count, for a metrics URL that is not a Ray pod's.
TRANSFERS = NIXL_TRANSFER_TIME.name.removeprefix("ray_vllm_") + "_count"
FAILED_TRANSFERS = NIXL_FAILED_TRANSFERS.name.removeprefix("ray_vllm_")


@dataclass(frozen=True)
class StreamTiming:
    time_to_first_token: float
    inter_token_latencies: list[float]
    tokens: int

    @property
    def mean_itl(self) -> float:
        return statistics.fmean(self.inter_token_latencies) if self.inter_token_latencies else 0.0


def stream_one_completion(
    client: OpenAI, model: str, prompt: str, clock: Callable[[], float] = time.perf_counter
) -> StreamTiming:
    start = clock()
    arrivals = []
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], stream=True, max_tokens=64
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(clock())
    if not arrivals:
        raise RuntimeError("the endpoint streamed no tokens")
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    return StreamTiming(arrivals[0] - start, gaps, len(arrivals))


@dataclass(frozen=True)
class TransferEvidence:
    transfers: float
    failed_transfers: float
    sources: int


def _metric_total(texts: Iterable[str], suffix: str) -> float:
    """Sum of a metric over every label set and endpoint. A counter may be exported with and
    without the _total suffix; the larger sum is the counter (they never both count)."""
    plain, totals = 0.0, 0.0
    wanted = {f"vllm:{suffix}", f"vllm_{suffix}"}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name.removeprefix("ray_")
                if name in wanted:
                    plain += sample.value
                elif name.removesuffix("_total") in wanted:
                    totals += sample.value
    return max(plain, totals)


def transfer_evidence(metrics_texts: list[str]) -> TransferEvidence:
    return TransferEvidence(
        transfers=_metric_total(metrics_texts, TRANSFERS),
        failed_transfers=_metric_total(metrics_texts, FAILED_TRANSFERS),
        sources=len(metrics_texts),
    )


def transfers_during(before: TransferEvidence, after: TransferEvidence) -> TransferEvidence:
    """What the check's own request caused. The counters are cumulative: decode's start-up
    prewarm already transferred once, and an old failure would otherwise fail every check."""
    return TransferEvidence(
        transfers=after.transfers - before.transfers,
        failed_transfers=after.failed_transfers - before.failed_transfers,
        sources=after.sources,
    )


def kv_verdict(evidence: TransferEvidence, backend: str) -> Check:
    name = f"KV moved from prefill to decode over NIXL/{backend}"
    detail = (
        f"{evidence.transfers:.0f} NIXL transfers, {evidence.failed_transfers:.0f} failed during "
        f"the streamed completion, on {evidence.sources} decode metrics endpoint(s)"
    )
    if evidence.transfers > 0 and evidence.failed_transfers == 0:
        return passed(f"{name}: yes", detail)
    return failed(
        f"{name}: no",
        detail,
        "check the decode logs for 'Backend LIBFABRIC was instantiated' and kv_transfer_config "
        "on both sides; without transfers decode recomputes the prompt",
    )


def fetch_text(url: str) -> str:
    """One metrics endpoint reached directly (a port-forward, or a test server)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def decode_metrics_from_kubernetes(namespace: str, rayservice: str, port: int) -> list[str]:
    """Prometheus text of every decode worker pod, through the API server's pod proxy."""
    from kubernetes import client, config

    config.load_kube_config()
    core = client.CoreV1Api()
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"llm-serving/rayservice={rayservice},llm-serving/role=decode"
    ).items
    return [
        core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod.metadata.name}:{port}", namespace, path="metrics"
        )
        for pod in pods
        if pod.status.phase == "Running"
    ]
