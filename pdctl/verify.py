"""After deploy: does the endpoint answer, and did the KV cache really cross from prefill to
decode through NIXL? Evidence from the decode workers' Prometheus metrics:
vllm:nixl_xfer_time_seconds_count > 0 and vllm:nixl_num_failed_transfers == 0. EFA's RDMA write
counters stay at zero by design with the pull connector, so they prove nothing.
"""

from __future__ import annotations

import itertools
import statistics
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx2 as httpx  # the HTTP client the openai package is built on
import openai
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from catalog.metrics import NIXL_FAILED_TRANSFERS, NIXL_TRANSFER_TIME
from pdctl import sigv4
from pdctl.checks import Check, failed, passed

# vLLM's names without the "vllm:" or "ray_vllm_" in front (catalog/metrics.py has the names
# Ray exports); all spellings count, for a metrics URL that is not a Ray pod's.
TRANSFERS = NIXL_TRANSFER_TIME.name.removeprefix("ray_vllm_") + "_count"
TRANSFER_SECONDS = NIXL_TRANSFER_TIME.name.removeprefix("ray_vllm_") + "_sum"
FAILED_TRANSFERS = NIXL_FAILED_TRANSFERS.name.removeprefix("ray_vllm_")
# Every network call is bounded: the openai client's defaults (10 minutes, two retries) let a
# hung endpoint hold the check for half an hour.
DEFAULT_TIMEOUT_SECONDS = 30.0
METRICS_BYTES_MAX = 20_000_000
# Ray exports a worker's metrics to its node's metrics port every metrics_report_interval_ms
# (10 s by default; ray/_private/telemetry/open_telemetry_metric_recorder.py): the completion's
# own transfer shows there up to one interval after the stream ended, plus the agent's export.
# Read before that and a working hand-off looks like none (`make e2e` caught it).
METRICS_EXPORT_WAIT_SECONDS = 25.0
# The check's prompt is a few dozen tokens: tens of MB of KV at most for the largest models,
# about a millisecond over one EFA device. A mean transfer a hundred times that is not the
# model's size; it is the fabric (or UCX's TCP fallback, which takes seconds).
SLOW_TRANSFER_SECONDS = 0.1


# What a misbehaving endpoint can raise through the openai client: its own errors, and a
# transport or decoding error it lets through mid-stream (a reset, a truncated body, JSON that is
# not a completion).
_ENDPOINT_ERRORS = (openai.OpenAIError, OSError, ValueError, TypeError, AttributeError, KeyError)


class VerifyError(Exception):
    """Something the endpoint or a metrics URL did that ends the check, in one line."""


def client_for(base_url: str, timeout: float) -> OpenAI:
    """Requests to the IAM-authenticated API (an execute-api URL) are SigV4-signed."""
    region = sigv4.execute_api_region(base_url)
    return OpenAI(
        base_url=f"{base_url.rstrip('/')}/v1",
        api_key="unused",
        timeout=openai.Timeout(timeout, connect=min(timeout, 5.0)),
        max_retries=0,
        http_client=httpx.Client(auth=sigv4.SigV4Auth(region)) if region else None,
    )


def list_models(client: OpenAI) -> list[str]:
    try:
        return [model.id for model in client.models.list()]
    except _ENDPOINT_ERRORS as error:
        raise VerifyError(f"listing models failed: {_describe(error)}") from None


def _describe(error: BaseException) -> str:
    if isinstance(error, openai.APITimeoutError):
        return "no answer within the timeout"
    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}: {str(error.message)[:200]}"
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        return f"connection failed ({type(cause).__name__}: {str(cause)[:200]})"
    return f"{type(error).__name__}: {str(error)[:200]}"


@dataclass(frozen=True)
class StreamTiming:
    time_to_first_token: float
    inter_token_latencies: list[float]
    tokens: int

    @property
    def mean_itl(self) -> float:
        return statistics.fmean(self.inter_token_latencies) if self.inter_token_latencies else 0.0


def stream_one_completion(
    client: OpenAI,
    model: str,
    prompt: str,
    clock: Callable[[], float] = time.perf_counter,
    deadline_seconds: float = 4 * DEFAULT_TIMEOUT_SECONDS,
) -> StreamTiming:
    """Raises VerifyError for anything but a well-formed stream that ends in time."""
    start = clock()
    arrivals = []
    try:
        stream = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            stream=True,
            max_tokens=64,
        )
        for chunk in stream:
            if clock() - start > deadline_seconds:
                stream.close()
                raise VerifyError(f"the stream did not finish within {deadline_seconds:.0f} s")
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(clock())
    except VerifyError:
        raise
    except _ENDPOINT_ERRORS as error:
        raise VerifyError(f"the streamed completion failed: {_describe(error)}") from None
    if not arrivals:
        raise VerifyError("the endpoint streamed no tokens")
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    return StreamTiming(arrivals[0] - start, gaps, len(arrivals))


@dataclass(frozen=True)
class TransferEvidence:
    transfers: float
    failed_transfers: float
    sources: int
    # Whether the transfer-time histogram was there at all: a decode worker exports it from its
    # start-up prewarm on, so its absence means the URL is not a decode worker's metrics.
    seen: bool = True
    reset: bool = False  # a counter went down: a decode worker restarted during the check
    transfer_seconds: float = 0.0  # the transfer-time histogram's sum

    @property
    def mean_transfer_seconds(self) -> float:
        return self.transfer_seconds / self.transfers if self.transfers > 0 else 0.0


def _metric_total(texts: Iterable[str], suffix: str) -> tuple[float, bool]:
    """Sum of a metric over every label set and endpoint, and whether it appeared at all. A
    counter may be exported with and without the _total suffix; the larger sum is the counter
    (they never both count)."""
    plain, totals, seen = 0.0, 0.0, False
    wanted = {f"vllm:{suffix}", f"vllm_{suffix}"}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name.removeprefix("ray_")
                if name in wanted:
                    plain += sample.value
                    seen = True
                elif name.removesuffix("_total") in wanted:
                    totals += sample.value
                    seen = True
    return max(plain, totals), seen


def transfer_evidence(metrics_texts: list[str]) -> TransferEvidence:
    try:
        transfers, seen = _metric_total(metrics_texts, TRANSFERS)
        failures, _ = _metric_total(metrics_texts, FAILED_TRANSFERS)
        seconds, _ = _metric_total(metrics_texts, TRANSFER_SECONDS)
    except (ValueError, TypeError, IndexError) as error:
        raise VerifyError(f"the metrics are not Prometheus text ({error})") from None
    return TransferEvidence(
        transfers, failures, len(metrics_texts), seen=seen, transfer_seconds=seconds
    )


def transfers_during(before: TransferEvidence, after: TransferEvidence) -> TransferEvidence:
    """What the check's own request caused. The counters are cumulative: decode's start-up
    prewarm already transferred once, and an old failure would otherwise fail every check."""
    reset = (
        after.transfers < before.transfers
        or after.failed_transfers < before.failed_transfers
        or after.sources != before.sources
    )
    return TransferEvidence(
        transfers=after.transfers - before.transfers,
        failed_transfers=after.failed_transfers - before.failed_transfers,
        sources=after.sources,
        seen=before.seen and after.seen,
        reset=reset,
        transfer_seconds=after.transfer_seconds - before.transfer_seconds,
    )


def await_transfers(
    read: Callable[[], TransferEvidence],
    before: TransferEvidence,
    wait_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = 0.5,
) -> TransferEvidence:
    """Reads the metrics until they show what the completion did (a transfer, a failure, a
    restart, no NIXL metrics at all) or ``wait_seconds`` have passed; what they show then."""
    deadline = clock() + wait_seconds
    while True:
        during = transfers_during(before, read())
        settled = during.transfers > 0 or during.failed_transfers > 0 or during.reset
        if settled or not during.seen or clock() >= deadline:
            return during
        sleep(interval)


SLOW_TRANSFER_HINT = (
    "slow or missing transfers with the LIBFABRIC backend point at the fabric: run "
    "`pdctl efa-check` (every EFA device of a prefill and a decode node, against the catalog's "
    "line rate)"
)


def kv_verdict(
    evidence: TransferEvidence, backend: str, slow_seconds: float = SLOW_TRANSFER_SECONDS
) -> Check:
    """Yes only on evidence: transfers counted by decode during this check and none failed.
    Data that cannot tell (no decode metrics, a restart in between) is a failure to verify,
    never a yes and never a no."""
    name = f"KV moved from prefill to decode over NIXL/{backend}"
    detail = (
        f"{evidence.transfers:.0f} NIXL transfers, {evidence.failed_transfers:.0f} failed during "
        f"the streamed completion, on {evidence.sources} decode metrics endpoint(s); mean "
        f"transfer {evidence.mean_transfer_seconds * 1000:.1f} ms"
    )
    if evidence.sources == 0 or not evidence.seen:
        return failed(
            f"{name}: cannot tell",
            f"no NIXL metrics on {evidence.sources} endpoint(s)",
            "point --metrics-url at the decode workers' metrics port (8080); a decode worker "
            "exports NIXL transfer times from its start-up prewarm on",
        )
    if evidence.reset:
        return failed(
            f"{name}: cannot tell",
            "a counter went down or an endpoint came or went during the check: a decode worker "
            "restarted",
            "run pdctl verify again once the decode workers are steady",
        )
    if evidence.transfers > 0 and evidence.failed_transfers == 0:
        if evidence.mean_transfer_seconds > slow_seconds:
            return failed(
                f"{name}: yes, but slowly",
                f"{detail} (more than {slow_seconds * 1000:.0f} ms)",
                SLOW_TRANSFER_HINT,
            )
        return passed(f"{name}: yes", detail)
    return failed(
        f"{name}: no",
        detail,
        "check the decode logs for 'Backend LIBFABRIC was instantiated' and kv_transfer_config "
        f"on both sides; without transfers decode recomputes the prompt; {SLOW_TRANSFER_HINT}",
    )


def fetch_text(url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> str:
    """One metrics endpoint reached directly (a port-forward, or a test server)."""
    if not url.startswith(("http://", "https://")):
        raise VerifyError(f"metrics {url}: not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read(METRICS_BYTES_MAX).decode(errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise VerifyError(f"metrics {url}: {type(error).__name__}: {error}") from None


def decode_metrics_from_kubernetes(
    namespace: str, rayservice: str, port: int, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> list[str]:
    """Prometheus text of every decode worker pod, through the API server's pod proxy."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    try:
        config.load_kube_config()
        core = client.CoreV1Api()
        pods = core.list_namespaced_pod(
            namespace,
            label_selector=f"llm-serving/rayservice={rayservice},llm-serving/role=decode",
            _request_timeout=timeout,
        ).items
        return [
            core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod.metadata.name}:{port}", namespace, path="metrics", _request_timeout=timeout
            )
            for pod in pods
            if pod.status.phase == "Running"
        ]
    except (ApiException, ConfigException, OSError) as error:
        raise VerifyError(
            f"reading decode metrics through the Kubernetes API failed ({type(error).__name__}: "
            f"{str(error)[:200]}); pass --metrics-url with a port-forward instead"
        ) from None
