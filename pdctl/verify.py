"""After deploy: does the endpoint answer, and did the KV cache really cross from prefill to
decode through NIXL? Evidence from the decode workers' Prometheus metrics:
vllm:nixl_xfer_time_seconds_count > 0 and vllm:nixl_num_failed_transfers == 0. EFA's RDMA write
counters stay at zero by design with the pull connector, so they prove nothing.

The rule for every "yes": positive, finite, complete evidence. A stream counts only when it
ended as the OpenAI protocol ends one (a finish_reason of stop or length, then `data: [DONE]`);
a metric counts only when each of its samples is a finite, non-negative number, and a transfer
only when both the count and the time sum grew by finite, positive amounts during the check.
Anything else is "no" (the endpoint answered wrongly) or "cannot tell" (the evidence cannot
decide), never "yes".
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from typing import Any

from catalog.metrics import NIXL_FAILED_TRANSFERS, NIXL_TRANSFER_TIME
from pdctl.checks import Check, failed, passed, undecided
from pdctl.http_call import (
    Deadline,
    DeadlineExceededError,
    HttpCallError,
    UnreachableError,
    iter_chunks,
    open_response,
    read_body,
    within,
)
from pdctl.output import CannotRunError, plain

# vLLM's names without the "vllm:" or "ray_vllm_" in front (catalog/metrics.py has the names
# Ray exports); all spellings count, for a metrics URL that is not a Ray pod's.
TRANSFERS = NIXL_TRANSFER_TIME.name.removeprefix("ray_vllm_") + "_count"
TRANSFER_SECONDS = NIXL_TRANSFER_TIME.name.removeprefix("ray_vllm_") + "_sum"
FAILED_TRANSFERS = NIXL_FAILED_TRANSFERS.name.removeprefix("ray_vllm_")
# Every network call is bounded as a whole (pdctl/http_call.py), streaming included.
DEFAULT_TIMEOUT_SECONDS = 30.0
METRICS_BYTES_MAX = 20_000_000
MODELS_BYTES_MAX = 5_000_000
STREAM_BYTES_MAX = 5_000_000
SSE_LINE_BYTES_MAX = 1_000_000
MAX_TOKENS = 64
# The OpenAI protocol's finish reasons of a completion that ended by itself; vLLM 0.26 also
# sends "abort" and "error" (vllm/entrypoints/openai/protocol.py), which are failures.
COMPLETE_FINISH_REASONS = ("stop", "length")
# Ray exports a worker's metrics to its node's metrics port every metrics_report_interval_ms
# (10,000 ms by default: src/ray/common/ray_config_def.h; the app does not change it), each
# worker on its own tick: a request shows there up to one interval after it ended, plus the
# agent's export. Read before that and a working hand-off looks like none, and an earlier
# request's export can be taken for this one's (`make e2e` caught both).
METRICS_REPORT_INTERVAL_SECONDS = 10.0
METRICS_EXPORT_MARGIN_SECONDS = 1.0
METRICS_EXPORT_WAIT_SECONDS = 25.0
# The check's prompt is a few dozen tokens: tens of MB of KV at most for the largest models,
# about a millisecond over one EFA device. A mean transfer a hundred times that is not the
# model's size; it is the fabric (or UCX's TCP fallback, which takes seconds).
SLOW_TRANSFER_SECONDS = 0.1


class VerifyError(Exception):
    """The endpoint answered, wrongly: the check failed (one line)."""


class EvidenceError(Exception):
    """Metrics that cannot decide: missing, malformed, not finite, or negative."""


@contextmanager
def _endpoint_errors(what: str) -> Iterator[None]:
    """One meaning for every failure of a call to the endpoint: not reachable is "could not
    run"; a deadline or a broken answer is a failed check."""
    try:
        yield
    except UnreachableError as error:
        raise CannotRunError(str(error), "check --url (a port-forward, or the VPC)") from None
    except DeadlineExceededError as error:
        raise VerifyError(str(error)) from None
    except HttpCallError as error:
        raise VerifyError(f"{what} failed: {error}") from None


def _call(
    method: str, url: str, deadline: Deadline, what: str, body: bytes | None = None
) -> tuple[int, Message, bytes]:
    """Status, headers and the whole body of one bounded call."""
    headers = {"Content-Type": "application/json"} if body else {}
    with _endpoint_errors(what), open_response(method, url, deadline, body, headers) as response:
        data = read_body(response, deadline, what, MODELS_BYTES_MAX)
        return response.status, response.headers, data


def parse_json(data: bytes | str, what: str) -> Any:
    """JSON from a server, or a VerifyError naming what it was meant to be. json accepts NaN
    and Infinity, which no answer here can hold, and recurses into deep nesting."""
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise VerifyError(f"{what}: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise VerifyError(f"{what}: not JSON ({plain(error, 120)})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# API Gateway names why it refused a request in the x-amzn-ErrorType header (its value is
# "<type>" or "<type>:<namespace>"; the body is {"message": ...}): API Gateway developer guide,
# "Gateway response types" and "Troubleshoot ... 403 errors". MISSING_AUTHENTICATION_TOKEN
# (MissingAuthenticationTokenException) is also what it answers for a path or stage the API has
# no resource for, signed or not; a private API answers ForbiddenException to a request that
# did not come through an allowed VPC endpoint.
API_GATEWAY_ERROR_TYPE = "x-amzn-ErrorType"
API_GATEWAY_HINTS = {
    "MissingAuthenticationTokenException": "API Gateway answers this for a path or stage it has "
    "no resource for (a signed request too): the URL must end with the stage, as the serving "
    "stack's EndpointUrl output does (https://<api>.execute-api.<region>.amazonaws.com/<stage>); "
    "pdctl adds /v1/... itself",
    "IncompleteSignatureException": "the request's signature is not a whole SigV4 signature: a "
    "proxy may have changed its headers; sign in again",
    "InvalidSignatureException": "the signature does not match: check the machine's clock and "
    "the region in the URL, and that nothing between rewrites the request",
    "UnrecognizedClientException": "the credentials are not valid: sign in again",
    "ExpiredTokenException": "the credentials expired: sign in again (aws sso login)",
    "AccessDeniedException": "the caller may not invoke the API: allow execute-api:Invoke on the "
    "serving stack's ModelApiInvokeArn output for this identity",
    "TooManyRequestsException": "API Gateway throttled the request (the stage's or the "
    "account's request rate): run pdctl verify again in a minute",
    "ThrottlingException": "API Gateway throttled the request: run pdctl verify again in a minute",
    "ForbiddenException": "a private API admits only requests through its execute-api VPC "
    "endpoint: run from a host that endpoint admits (README, 'Reaching what you deployed')",
}


def _http_failure(what: str, status: int, headers: Message, data: bytes) -> Exception:
    """An HTTP error as what it is: API Gateway's refusal with its error type (a refusal of the
    caller is "could not run", exit 2), or the endpoint's own error (the check failed)."""
    content_type = headers.get("Content-Type", "") or "no content type"
    message = data[:300].decode(errors="replace")
    try:
        answer = json.loads(data[:100_000])
        error = answer.get("error")
        message = error.get("message", message) if isinstance(error, dict) else error or message
        for key in ("message", "Message"):  # API Gateway's bodies (IAM denials: "Message")
            if isinstance(answer.get(key), str) and "error" not in answer:
                message = answer[key]
    except (ValueError, AttributeError, RecursionError):
        pass  # not the JSON error shape: the raw start of the body says it best
    error_type = (headers.get(API_GATEWAY_ERROR_TYPE) or "").split(":", 1)[0].strip()
    said = f"HTTP {status} ({content_type}): {plain(message, 200)}"
    if error_type:
        said = (
            f"API Gateway refused it: HTTP {status} {plain(error_type, 80)}: {plain(message, 200)}"
        )
        hint = API_GATEWAY_HINTS.get(error_type, "")
        if status in (401, 403) or error_type in API_GATEWAY_HINTS:
            return CannotRunError(f"{what}: {said}", hint)
        return VerifyError(f"{what} failed: {said}" + (f"; {hint}" if hint else ""))
    return VerifyError(f"{what} failed: {said}")


def list_models(base_url: str, timeout: float) -> list[str]:
    what = "listing models"
    status, headers, data = _call("GET", f"{_base(base_url)}/v1/models", Deadline(timeout), what)
    if status != 200:
        raise _http_failure(what, status, headers, data)
    content_type = headers.get("Content-Type", "")
    answer = parse_json(data, f"{what}: the answer ({content_type or 'no content type'})")
    listed = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(listed, list):
        raise VerifyError(f"{what}: the answer has no 'data' list of models")
    ids = [item.get("id") for item in listed if isinstance(item, dict)]
    if len(ids) != len(listed) or not all(isinstance(i, str) for i in ids):
        raise VerifyError(f"{what}: a listed model has no string 'id'")
    return ids


def _base(url: str) -> str:
    return url.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class StreamTiming:
    time_to_first_token: float
    inter_token_latencies: list[float]
    tokens: int
    finish_reason: str

    @property
    def mean_itl(self) -> float:
        return statistics.fmean(self.inter_token_latencies) if self.inter_token_latencies else 0.0


def sse_data(chunks: Iterable[bytes]) -> Iterator[str]:
    """The `data` of each server-sent event (WHATWG HTML, "Parsing an event stream"): lines end
    in CR, LF or CRLF; a line starting with ':' is a comment (keep-alives); `data:` lines of one
    event join with LF; a blank line dispatches the event; an event left without its blank line
    when the stream ends is discarded."""
    buffer, data, pending_cr = b"", [], False
    for chunk in chunks:
        if pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across chunks
        buffer += chunk
        pending_cr = buffer.endswith(b"\r")
        lines = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        buffer = lines.pop()
        if len(buffer) > SSE_LINE_BYTES_MAX:
            raise VerifyError(f"the stream sent a line longer than {SSE_LINE_BYTES_MAX:,} bytes")
        for raw in lines:
            line = raw.decode(errors="replace")
            if not line:
                if any(data):  # an event whose data is empty carries nothing to read
                    yield "\n".join(data)
                data = []
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                if field == "data":
                    data.append(value.removeprefix(" "))


def _choice_text(choice: Any) -> tuple[str, str | None]:
    """The text a stream choice carries (answer or reasoning) and its finish_reason."""
    if not isinstance(choice, dict):
        raise VerifyError("the stream sent a choice that is not an object")
    delta = choice.get("delta") or {}
    reason = choice.get("finish_reason")
    if not isinstance(delta, dict) or not (reason is None or isinstance(reason, str)):
        raise VerifyError("the stream sent a choice whose delta or finish_reason is malformed")
    texts = [delta.get(key) for key in ("content", "reasoning_content", "reasoning")]
    if not all(text is None or isinstance(text, str) for text in texts):
        raise VerifyError("the stream sent content that is not text")
    return "".join(text for text in texts if text), reason


def stream_one_completion(
    base_url: str,
    model: str,
    prompt: str,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
    max_tokens: int = MAX_TOKENS,
) -> StreamTiming:
    """One streamed chat completion, whole within `timeout`; raises VerifyError for anything
    but a well-formed stream that ended as the protocol ends one."""
    what = "the streamed completion"
    deadline = Deadline(timeout)
    request = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "max_tokens": max_tokens,
    }
    start = clock()
    arrivals: list[float] = []
    finish, done = None, False
    url = f"{_base(base_url)}/v1/chat/completions"
    with (
        _endpoint_errors(what),
        open_response(
            "POST",
            url,
            deadline,
            json.dumps(request).encode(),
            {"Content-Type": "application/json", "Accept": "text/event-stream"},
        ) as response,
    ):
        if response.status != 200:
            data = read_body(response, deadline, what, MODELS_BYTES_MAX)
            raise _http_failure(what, response.status, response.headers, data)
        media_type = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if media_type != "text/event-stream":
            # A whole answer where a stream was asked for ("stream": true): vLLM streams as
            # text/event-stream; this is not a stream cut short, it is no stream.
            start = read_body(response, deadline, what, MODELS_BYTES_MAX)[:120]
            raise VerifyError(
                f"{what}: the endpoint answered {media_type or 'without a content type'}, not "
                f"a stream (text/event-stream), to a request with stream: true; it begins "
                f"{plain(start.decode(errors='replace'), 120)!r}"
            )
        for data in sse_data(iter_chunks(response, deadline, what, STREAM_BYTES_MAX)):
            if data == "[DONE]":
                done = True
                break
            event = parse_json(data, f"{what}: an event")
            if not isinstance(event, dict):
                raise VerifyError(f"{what}: an event that is not a JSON object")
            if "error" in event:
                raise VerifyError(f"{what}: the endpoint reported {plain(event['error'], 200)}")
            choices = event.get("choices")
            if not isinstance(choices, list):
                raise VerifyError(f"{what}: an event without a 'choices' list")
            for choice in choices:
                text, reason = _choice_text(choice)
                if text:
                    arrivals.append(clock())
                finish = reason or finish
    if finish is None:
        raise VerifyError(
            f"{what} was cut short: {len(arrivals)} chunks and no finish_reason"
            + (" before [DONE]" if done else ", no [DONE]")
        )
    if finish not in COMPLETE_FINISH_REASONS:
        raise VerifyError(f"{what} ended with finish_reason {plain(finish, 40)!r}")
    if not done:
        raise VerifyError(f"{what} ended without [DONE] after finish_reason {finish!r}")
    if not arrivals:
        raise VerifyError(f"{what}: the endpoint streamed no tokens")
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    return StreamTiming(arrivals[0] - start, gaps, len(arrivals), finish)


@dataclass(frozen=True)
class TransferEvidence:
    transfers: float
    failed_transfers: float
    sources: int
    # Whether the transfer-time histogram was there at all. Ray exports a series only after its
    # first increment, so a decode worker shows it from its first hand-off on (there is no
    # start-up pre-warm: serve-pd-app.yaml); absent after the check's own request, the URL is
    # not a decode worker's metrics.
    seen: bool = True
    reset: bool = False  # a counter went down: a decode worker restarted during the check
    transfer_seconds: float = 0.0  # the transfer-time histogram's sum

    @property
    def mean_transfer_seconds(self) -> float:
        return self.transfer_seconds / self.transfers if self.transfers > 0 else 0.0


def metric_total(texts: Iterable[str], suffix: str) -> tuple[float, bool]:
    """Sum of a metric over every label set and endpoint, and whether it appeared at all. A
    counter may be exported with and without the _total suffix; the larger sum is the counter
    (they never both count). Every sample must be a finite, non-negative number: counters and
    histogram counts and sums of durations are nothing else."""
    from prometheus_client.parser import text_string_to_metric_families

    plain_sum, totals, seen = 0.0, 0.0, False
    wanted = {f"vllm:{suffix}", f"vllm_{suffix}"}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name.removeprefix("ray_")
                if name not in wanted and name.removesuffix("_total") not in wanted:
                    continue
                if not math.isfinite(sample.value) or sample.value < 0:
                    raise EvidenceError(f"{sample.name} = {sample.value}: not a count")
                seen = True
                if name in wanted:
                    plain_sum += sample.value
                else:
                    totals += sample.value
    return max(plain_sum, totals), seen


def metric_totals(texts: list[str], *suffixes: str) -> list[tuple[float, bool]]:
    """``metric_total`` of each suffix; text that does not parse is evidence of nothing."""
    try:
        return [metric_total(texts, suffix) for suffix in suffixes]
    except EvidenceError:
        raise
    except Exception as error:  # the parser's errors are ValueError, and more on odd input
        raise EvidenceError(f"the metrics are not Prometheus text ({plain(error, 200)})") from None


def transfer_evidence(metrics_texts: list[str]) -> TransferEvidence:
    (transfers, seen), (failures, _), (seconds, _) = metric_totals(
        metrics_texts, TRANSFERS, FAILED_TRANSFERS, TRANSFER_SECONDS
    )
    return TransferEvidence(
        transfers, failures, len(metrics_texts), seen=seen, transfer_seconds=seconds
    )


def transfers_during(before: TransferEvidence, after: TransferEvidence) -> TransferEvidence:
    """What the check's own request caused. The counters are cumulative: earlier requests'
    transfers and an old failure would otherwise decide every check. A series absent before
    the request (never incremented yet) counts from zero."""
    reset = (
        after.transfers < before.transfers
        or after.failed_transfers < before.failed_transfers
        or after.transfer_seconds < before.transfer_seconds
        or after.sources != before.sources
    )
    return TransferEvidence(
        transfers=after.transfers - before.transfers,
        failed_transfers=after.failed_transfers - before.failed_transfers,
        sources=after.sources,
        seen=after.seen,
        reset=reset,
        transfer_seconds=after.transfer_seconds - before.transfer_seconds,
    )


@dataclass(frozen=True)
class MetricsWaits:
    """How long verify waits on the workers' metrics pages: at most ``wait_seconds`` for a
    request to show, and a reading counts as complete ``report_interval`` after the request
    ended (Ray's metrics_report_interval_ms of the cluster)."""

    wait_seconds: float = METRICS_EXPORT_WAIT_SECONDS
    report_interval: float = METRICS_REPORT_INTERVAL_SECONDS

    def complete_from(self, ended: float) -> float:
        return reported_after(ended, self.report_interval)


def reported_after(ended: float, report_interval: float) -> float:
    """The monotonic time from which a metrics page shows every request that ended by
    ``ended``: each worker has reported once since, and the agent has exported it."""
    return ended + report_interval + METRICS_EXPORT_MARGIN_SECONDS


def await_transfers(
    read: Callable[[], TransferEvidence],
    before: TransferEvidence,
    wait_seconds: float,
    complete_from: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = 0.5,
) -> TransferEvidence:
    """Reads the metrics until they show what the completion did or ``wait_seconds`` have
    passed; what they show then.

    A failure or a restart decides at once. A transfer decides only in a reading begun at
    ``complete_from`` or later (``reported_after`` the completion): ``before`` can miss an
    earlier request's transfer that its worker had not reported yet, and that transfer then
    shows first, ahead of the completion's own failed one (`make e2e` in CI, 2026-12-07: a
    repeated prompt of the check before, seen as this check's hand-off). No NIXL metrics at
    all is an answer only at the deadline: Ray exports a series after its first observation,
    so a decode that never transferred before this request shows none until its next report
    (seen on an H200, 2026-12-01)."""
    deadline = clock() + wait_seconds
    while True:
        begun = clock()
        during = transfers_during(before, read())
        if during.failed_transfers > 0 or during.reset:
            return during
        if (during.transfers > 0 and begun >= complete_from) or begun >= deadline:
            return during
        sleep(interval)


SLOW_TRANSFER_HINT = (
    "slow or missing transfers with the LIBFABRIC backend point at the fabric: run "
    "`pdctl efa-check` (every EFA device of a prefill and a decode node, against the catalog's "
    "line rate)"
)
# The UCX backend inside a shared node: a pull that UCX's cuda_ipc does not serve zero-copy is
# relayed over TCP at about 0.5 GB/s (vllm-project/vllm#52607, ai-dynamo/nixl#2208).
SLOW_IN_NODE_HINT = (
    "slow transfers with the UCX backend on shared nodes point at UCX leaving cuda_ipc: check "
    "that the worker pod carries UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y and no UCX_TLS without cuda_ipc "
    "(docs/architecture.md, 'Prefill and decode on one node')"
)
# vLLM 0.26 with NIXL's LIBFABRIC backend does not fall back when NIXL cannot open an EFA device:
# the engine dies at start (issue 18, observed with real engines), so a broken node shows as a
# replica that restarts on one side. Devices missing when the pod starts stop it earlier, in the
# workers' efa-devices init container (serving_manifests/efa_device_check.py).
NIXL_NO_DEVICE_HINT = (
    "a worker that restarts, its log showing `nixlNotFoundError: NIXL_ERR_NOT_FOUND` from the "
    "NIXL worker's init, or a worker pod failing its `efa-devices` init container ('EFA check "
    "failed on the <side> node NODE'), sits on a node where NIXL could not open an EFA device: "
    "`kubectl cordon NODE`, then run `pdctl efa-check --prefill-node NODE` or "
    "`--decode-node NODE` for that node (docs/observability.md, 'EFA runbook')"
)


def _whole(value: float) -> bool:
    return math.isfinite(value) and value >= 0 and value == int(value)


def kv_verdict(
    evidence: TransferEvidence, backend: str, slow_seconds: float = SLOW_TRANSFER_SECONDS
) -> Check:
    """Yes only on evidence: transfers counted by decode during this check, taking time, and
    none failed. Data that cannot tell (no decode metrics, a restart in between, a count that
    is not a whole number, time that did not grow with the count) is a failure to verify, never
    a yes and never a no."""
    name = f"KV moved from prefill to decode over NIXL/{backend}"
    if evidence.sources == 0 or not evidence.seen:
        return undecided(
            f"{name}: cannot tell",
            f"no NIXL metrics on {evidence.sources} endpoint(s)",
            "point --metrics-url at the decode workers' metrics port (8080); a decode worker "
            "exports NIXL transfer times from its first hand-off on",
        )
    if evidence.reset:
        return undecided(
            f"{name}: cannot tell",
            "a counter went down or an endpoint came or went during the check: a decode worker "
            "restarted",
            f"run pdctl verify again once the decode workers are steady; {NIXL_NO_DEVICE_HINT}",
        )
    counts = (evidence.transfers, evidence.failed_transfers)
    timing_broken = evidence.transfers > 0 and not (
        math.isfinite(evidence.transfer_seconds) and evidence.transfer_seconds > 0
    )
    if not all(_whole(count) for count in counts) or timing_broken:
        return undecided(
            f"{name}: cannot tell",
            f"the counters moved by {evidence.transfers:g} transfers, "
            f"{evidence.failed_transfers:g} failures and {evidence.transfer_seconds:g} s: not "
            "whole counts with a positive transfer time",
            "these are not a decode worker's vLLM NIXL metrics; check --metrics-url",
        )
    detail = (
        f"{evidence.transfers:.0f} NIXL transfers, {evidence.failed_transfers:.0f} failed during "
        f"the streamed completion, on {evidence.sources} decode metrics endpoint(s); mean "
        f"transfer {evidence.mean_transfer_seconds * 1000:.1f} ms"
    )
    if evidence.transfers > 0 and evidence.failed_transfers == 0:
        if evidence.mean_transfer_seconds > slow_seconds:
            return failed(
                f"{name}: yes, but slowly",
                f"{detail} (more than {slow_seconds * 1000:.0f} ms)",
                SLOW_IN_NODE_HINT if backend == "UCX" else SLOW_TRANSFER_HINT,
            )
        return passed(f"{name}: yes", detail)
    return failed(
        f"{name}: no",
        detail,
        "check the decode logs for 'Backend LIBFABRIC was instantiated' and kv_transfer_config "
        f"on both sides; without transfers decode recomputes the prompt; {SLOW_TRANSFER_HINT}; "
        f"{NIXL_NO_DEVICE_HINT}",
    )


def fetch_text(url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> str:
    """One metrics endpoint reached directly (a port-forward, or a test server)."""
    what = f"metrics {url}"
    deadline = Deadline(timeout)
    try:
        with open_response("GET", url, deadline) as response:
            data = read_body(response, deadline, what, METRICS_BYTES_MAX)
            status = response.status
    except HttpCallError as error:
        raise EvidenceError(str(error)) from None
    if status != 200:
        raise EvidenceError(f"{what}: HTTP {status}")
    return data.decode(errors="replace")


def worker_metrics_from_kubernetes(
    settings: Any, port: int, timeout: float = DEFAULT_TIMEOUT_SECONDS, role: str = "decode"
) -> list[str]:
    """Prometheus text of every worker pod the side's engines run in (decode unless ``role``
    says otherwise), through the API server's pod proxy: the side's own group's pods, or on
    gpu_nodes.shared the shared pods, where both sides' engines run."""
    from pdctl import kube

    kube.load_kubeconfig(settings)
    namespace, rayservice = settings.serving.namespace, settings.serving.name
    group = settings.side(role).group

    def read() -> list[str]:
        from kubernetes import client

        core = client.CoreV1Api()
        pods = core.list_namespaced_pod(
            namespace,
            label_selector=f"llm-serving/rayservice={rayservice},llm-serving/role={group}",
            _request_timeout=timeout,
        ).items
        return [
            core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod.metadata.name}:{port}", namespace, path="metrics", _request_timeout=timeout
            )
            for pod in pods
            if pod.status.phase == "Running"
        ]

    try:
        texts = within(timeout, read, f"reading {role} metrics through the Kubernetes API")
    except TimeoutError as error:
        raise CannotRunError(str(error), "pass --metrics-url with a port-forward instead") from None
    except Exception as error:
        reason = kube.describe_api_error(error, settings)
        raise CannotRunError(
            str(reason), reason.hint or "pass --metrics-url with a port-forward instead"
        ) from None
    if not all(isinstance(text, str) for text in texts):
        raise EvidenceError("the pod proxy answered something that is not metrics text")
    return texts
