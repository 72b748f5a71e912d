"""pdctl verify against a local server that speaks OpenAI streaming and Prometheus text."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from typer.testing import CliRunner

from app_config import load_settings
from catalog.metrics import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES
from pdctl import prefix_reuse, verify
from pdctl.cli import app
from tests.configurations import context_for
from tests.pdctl.openai_stream import DONE, chunk, sse_event

SETTINGS = load_settings(context_for("default"))
MODEL = SETTINGS.serving.model.id
BLOCK = SETTINGS.serving.kv_transfer.block_size
TEMPLATE_TOKENS = 5  # what a chat template adds around the message


class PrefillEngine:
    """A prefill replica's prefix cache as vLLM 0.26 counts it: a prompt's tokens are queries;
    hits are the longest run of whole blocks of its first n - 1 tokens cached before (each
    block keyed by its whole prefix); its whole blocks are cached after. Exported by
    prometheus_client under the names Ray gives vLLM's counters (ray_vllm_..._total)."""

    def __init__(self, replica: str) -> None:
        self.blocks: set[tuple[str, ...]] = set()
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine", "ReplicaId"]
        self.queries = Counter(
            PREFIX_CACHE_QUERIES.name, "Prefix cache queries.", labels, registry=self.registry
        ).labels(MODEL, "0", replica)
        self.hits = Counter(
            PREFIX_CACHE_HITS.name, "Prefix cache hits.", labels, registry=self.registry
        ).labels(MODEL, "0", replica)

    def prefill(self, tokens: list[str]) -> None:
        hit = 0
        while hit + BLOCK <= len(tokens) - 1 and tuple(tokens[: hit + BLOCK]) in self.blocks:
            hit += BLOCK
        self.queries.inc(len(tokens))
        if hit:
            self.hits.inc(hit)
        for end in range(BLOCK, len(tokens) + 1, BLOCK):
            self.blocks.add(tuple(tokens[:end]))

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def _metrics(transfers: int, failed: int, seconds_each: float = 0.002) -> str:
    """What Ray's metrics agent exports for vLLM's NIXL metrics on a decode worker."""
    return (
        "# HELP ray_vllm:nixl_xfer_time_seconds Transfer duration\n"
        "# TYPE ray_vllm:nixl_xfer_time_seconds histogram\n"
        f'ray_vllm:nixl_xfer_time_seconds_bucket{{le="+Inf",model_name="m"}} {transfers}\n'
        f'ray_vllm:nixl_xfer_time_seconds_count{{model_name="m"}} {transfers}\n'
        f'ray_vllm:nixl_xfer_time_seconds_sum{{model_name="m"}} {transfers * seconds_each}\n'
        "# HELP ray_vllm:nixl_num_failed_transfers Failed transfers\n"
        "# TYPE ray_vllm:nixl_num_failed_transfers counter\n"
        f'ray_vllm:nixl_num_failed_transfers_total{{model_name="m"}} {failed}\n'
    )


class FakeServe(BaseHTTPRequestHandler):
    """Counters start where a real decode worker's would after start-up (prewarm transfers, an
    old failure) and grow by what each completion does. Each page shows its workers' state as
    of their last report, like Ray's periodic export: a request shows ``export_lag_s`` after it
    (``prefill_export_lag_s`` on prefill's page, each worker on its own tick)."""

    transfers_at_start, failed_at_start = 8, 1
    absent_until_first_transfer = False
    transfers_per_request, failed_per_request = 0, 0
    seconds_per_transfer = 0.002
    # Prefill: its replicas, which one each request reaches (index of the request), and the
    # tokens other clients' requests add on top of the check's own.
    prefill_replicas: list[PrefillEngine] = []
    route: tuple[int, ...] = ()
    other_tokens_per_request = 0
    export_lag_s = 0.0
    prefill_export_lag_s = 0.0
    # Transfers of a request that ended just before the check's first reading of decode's
    # page, reported by decode's tick between that reading and the check's own request.
    earlier_transfers = 0
    requests = 0

    def setup_state(self) -> None:
        """Each handler class's own request log, made on its first use."""
        cls = type(self)
        if "decode_reports" not in cls.__dict__:
            cls.decode_reports = [(-math.inf, 0, 0)]
            cls.prefill_reports = [(-math.inf, "")]

    @staticmethod
    def reported(reports: list[tuple[float, ...]], lag_s: float) -> tuple[float, ...]:
        """The newest state its worker has reported by now."""
        now = time.monotonic()
        return [report for report in reports if report[0] <= now - lag_s][-1]

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.setup_state()
        cls = type(self)
        if self.path == "/prefill-metrics":
            text = self.reported(cls.prefill_reports, cls.prefill_export_lag_s)[1]
            self._send(text.encode(), "text/plain; version=0.0.4")
        elif self.path == "/v1/models":
            body = {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "ray"}],
            }
            self._send(json.dumps(body).encode(), "application/json")
        else:
            _, transfers, failed = self.reported(cls.decode_reports, cls.export_lag_s)
            transfers += cls.transfers_at_start
            failed += cls.failed_at_start
            # Ray exports a series only after its first increment: a decode worker that has
            # handed off nothing yet (no pre-warm, no request) shows no NIXL metric at all.
            born = transfers or failed or not cls.absent_until_first_transfer
            text = _metrics(transfers, failed, cls.seconds_per_transfer) if born else ""
            self._send(text.encode(), "text/plain; version=0.0.4")

    def do_POST(self) -> None:
        self.setup_state()
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        if cls.prefill_replicas:
            tokens = body["messages"][0]["content"].split() + ["<t>"] * TEMPLATE_TOKENS
            replica = cls.route[cls.requests] if cls.requests < len(cls.route) else 0
            cls.prefill_replicas[replica].prefill(tokens)
            if cls.other_tokens_per_request:  # more of it with every request
                extra = cls.other_tokens_per_request * (cls.requests + 1)
                cls.prefill_replicas[replica].queries.inc(extra)
        now = time.monotonic()
        if cls.earlier_transfers and cls.requests == 0:  # reported by the tick just before
            cls.decode_reports.append((now - cls.export_lag_s, cls.earlier_transfers, 0))
        cls.requests += 1
        _, transfers, failed = cls.decode_reports[-1]
        cls.decode_reports.append(
            (now, transfers + cls.transfers_per_request, failed + cls.failed_per_request)
        )
        cls.prefill_reports.append((now, "".join(engine.text() for engine in cls.prefill_replicas)))
        events = [sse_event(chunk(MODEL, role="assistant", content=""))]
        events += [sse_event(chunk(MODEL, content=word)) for word in ("Hello", " there", "!")]
        events += [sse_event(chunk(MODEL, content="", finish_reason="stop")), DONE]
        self._send("".join(events).encode(), "text/event-stream")


@pytest.fixture(autouse=True)
def short_export_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake server exports when told, not a second after Ray's tick: a tenth keeps the
    waits short without changing what is waited for."""
    monkeypatch.setattr(verify, "METRICS_EXPORT_MARGIN_SECONDS", 0.1)


@pytest.fixture
def serve() -> Iterator[tuple[str, type[FakeServe]]]:
    handler = type("Handler", (FakeServe,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


def _verify(
    url: str,
    metrics_wait: float = 0,
    *extra: str,
    context: tuple[str, ...] = (),
    metrics_interval: float = 0,
) -> tuple[int, list[dict]]:
    result = CliRunner().invoke(
        app,
        [
            "verify",
            "--url",
            url,
            "--metrics-url",
            f"{url}/metrics",
            "--metrics-wait",
            str(metrics_wait),
            "--metrics-interval",
            str(metrics_interval),
            "--json",
            *extra,
            *(item for pair in context for item in ("--context", pair)),
        ],
    )
    return result.exit_code, json.loads(result.output)


def _verify_with_prefill(
    serve: tuple[str, type[FakeServe]],
    replicas: int = 1,
    route: tuple[int, ...] = (),
    context: tuple[str, ...] = (),
    metrics_wait: float = 0,
    metrics_interval: float = 0,
) -> tuple[int, list[dict]]:
    url, handler = serve
    handler.transfers_per_request = 3
    handler.prefill_replicas = [PrefillEngine(f"r{index}") for index in range(replicas)]
    handler.route = route
    return _verify(
        url,
        metrics_wait,
        "--prefill-metrics-url",
        f"{url}/prefill-metrics",
        context=context,
        metrics_interval=metrics_interval,
    )


def test_kv_moved_over_nixl(serve) -> None:
    url, handler = serve
    handler.transfers_per_request = 42
    code, checks = _verify(url)
    assert code == 0
    verdict = checks[-1]
    assert verdict["name"] == "KV moved from prefill to decode over NIXL/LIBFABRIC: yes"
    assert "42 NIXL transfers, 0 failed during the streamed completion" in verdict["detail"]
    assert "TTFT" in checks[1]["detail"]


def test_the_first_transfer_of_a_fresh_decode_worker_counts(serve) -> None:
    """No start-up pre-warm (serve-pd-app.yaml says why): before the check's own request the
    decode worker has exported no NIXL series; the request's transfers are the evidence."""
    url, handler = serve
    handler.transfers_at_start = handler.failed_at_start = 0
    handler.absent_until_first_transfer = True
    handler.transfers_per_request = 3
    code, checks = _verify(url, metrics_wait=2)
    assert code == 0, checks[-1]
    assert checks[-1]["name"].endswith(": yes")


def test_a_fresh_decode_workers_first_series_is_awaited_not_taken_as_absent(serve) -> None:
    """Ray exports a series at the worker's next report after its first observation: right after
    the first-ever transfer the NIXL series is not there yet, which is not an answer before the
    wait is over (seen on an H200 with real engines, 2026-12-01)."""
    url, handler = serve
    handler.transfers_at_start = handler.failed_at_start = 0
    handler.absent_until_first_transfer = True
    handler.transfers_per_request, handler.export_lag_s = 3, 0.5
    code, checks = _verify(url, metrics_wait=10, metrics_interval=0.5)
    assert code == 0, checks[-1]
    assert "3 NIXL transfers, 0 failed" in checks[-1]["detail"]


def test_no_kv_transferred_fails_even_after_startup_prewarm(serve) -> None:
    url, _ = serve  # counters stay at their start-up values: prewarm transfers only
    code, checks = _verify(url)
    assert code == 1
    assert checks[-1]["name"].endswith(": no")
    assert "Backend LIBFABRIC was instantiated" in checks[-1]["fix"]


def test_failed_transfers_fail_verification(serve) -> None:
    url, handler = serve
    handler.transfers_per_request, handler.failed_per_request = 10, 3
    code, checks = _verify(url)
    assert code == 1
    assert "3 failed" in checks[-1]["detail"]


@pytest.mark.parametrize(("metrics_wait", "exit_code"), [(0, 1), (10, 0)])
def test_waits_for_the_metrics_export_to_show_the_transfer(
    serve, metrics_wait: float, exit_code: int
) -> None:
    """Ray exports metrics every 10 s: right after the stream they do not show it yet."""
    url, handler = serve
    handler.transfers_per_request, handler.export_lag_s = 3, 0.5
    code, checks = _verify(url, metrics_wait, metrics_interval=0.5)
    assert code == exit_code
    if exit_code == 0:
        assert "3 NIXL transfers, 0 failed" in checks[-1]["detail"]


def test_slow_transfers_point_at_pdctl_efa_check(serve) -> None:
    """Transfers that happen but take far longer than a short prompt's KV needs: the fabric."""
    url, handler = serve
    handler.transfers_per_request, handler.seconds_per_transfer = 4, 1.5
    code, checks = _verify(url)
    assert code == 1
    assert checks[-1]["name"].endswith("yes, but slowly")
    assert "mean transfer 1500.0 ms" in checks[-1]["detail"]
    assert "pdctl efa-check" in checks[-1]["fix"]


def test_no_prefill_metrics_address_leaves_the_prefix_reuse_line_out(serve) -> None:
    """--metrics-url alone (a port-forward to decode): prefill's metrics have no address."""
    url, handler = serve
    handler.transfers_per_request = 3
    code, checks = _verify(url)
    assert code == 0
    assert not [c for c in checks if c["name"].startswith(prefix_reuse.NAME)]


def test_a_repeated_prompt_reuses_prefills_cached_blocks(serve) -> None:
    """The fake prefill caches as vLLM does; the check's own prompt, sent twice, hits every
    whole block of its first n - 1 tokens the second time."""
    code, checks = _verify_with_prefill(serve)
    assert code == 0, checks
    (line,) = [c for c in checks if c["name"].startswith(prefix_reuse.NAME)]
    assert line["name"].endswith(": yes")
    tokens = len(prefix_reuse.repeated_prompt(BLOCK).split()) + TEMPLATE_TOKENS
    hit = (tokens - 1) // BLOCK * BLOCK
    assert f"identical {tokens}-token prompts found {hit} tokens" in line["detail"]
    assert "(the first found 0)" in line["detail"]
    assert checks[-1] == line


@pytest.mark.parametrize(
    ("router", "exit_code", "ending"),
    [("prefix_affinity", 1, ": no"), ("power_of_two", 2, ": cannot tell")],
)
def test_a_repeat_that_reached_another_replica(serve, router, exit_code, ending) -> None:
    """Two replicas, the second request on the other one: a miss. Under prefix-aware routing
    that is a failure; under power-of-two over two replicas it is chance, not evidence."""
    context = (f"serving.prefill.request_router={router}", "serving.prefill.max_replicas=2")
    code, checks = _verify_with_prefill(serve, replicas=2, route=(0, 1), context=context)
    assert code == exit_code, checks
    line = checks[-1]
    assert line["name"] == f"{prefix_reuse.NAME}{ending}"
    assert "found 0 tokens" in line["detail"]


@pytest.mark.parametrize(("metrics_interval", "exit_code"), [(0.8, 0), (0.0, 2)])
def test_verifys_own_completion_counted_late_is_not_taken_for_other_traffic(
    serve, metrics_interval: float, exit_code: int
) -> None:
    """The streamed completion's lookup shows on prefill's page only after the KV line is
    done, in the same export as the first repeated prompt (CI, 2026-12-07: 393 and 389
    tokens, the 4 being "Say hello." templated). The check's first reading waits a report
    interval after that completion, so the two prompts are counted alone; told the cluster
    reports at once, it reads too early and cannot tell."""
    serve[1].prefill_export_lag_s = 0.8  # a report interval and the agent's export
    code, checks = _verify_with_prefill(serve, metrics_wait=5, metrics_interval=metrics_interval)
    assert code == exit_code, checks
    if exit_code == 0:
        assert checks[-1]["name"] == f"{prefix_reuse.NAME}: yes"
        assert "(the first found 0)" in checks[-1]["detail"]
    else:
        assert "other requests reached prefill" in checks[-1]["detail"]


def test_an_earlier_requests_late_transfer_is_not_taken_for_the_checks_own(serve) -> None:
    """A request that ended just before the check hands off KV that decode reports only after
    the check's first reading; the check's own hand-off fails. The earlier transfer shows
    first, and a verdict taken then said yes (`make e2e` in CI, 2026-12-07: verify right after
    verify, with transfers failing from the second on). A transfer counts only in a reading a
    report interval after the completion, by when its failure shows too."""
    url, handler = serve
    handler.earlier_transfers = 1
    handler.transfers_per_request, handler.failed_per_request = 0, 1
    handler.export_lag_s = 0.5
    code, checks = _verify(url, metrics_wait=10, metrics_interval=0.5)
    assert code == 1, checks
    assert checks[-1]["name"].endswith(": no"), checks[-1]
    assert "1 NIXL transfers, 1 failed" in checks[-1]["detail"]


def test_other_traffic_during_the_check_cannot_tell(serve) -> None:
    serve[1].other_tokens_per_request = 7
    code, checks = _verify_with_prefill(serve)
    assert code == 2, checks
    assert "other requests reached prefill" in checks[-1]["detail"]


def test_prefix_caching_turned_off_is_not_checked(serve) -> None:
    context = ('serving.prefill.engine_options={"enable_prefix_caching": false}',)
    code, checks = _verify_with_prefill(serve, context=context)
    assert code == 0, checks
    assert checks[-1]["name"] == f"{prefix_reuse.NAME}: not checked"
    assert serve[1].requests == 1  # the main completion only: no prompt sent twice


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_server_sent_events_follow_the_whatwg_parsing_rules(newline: str) -> None:
    """WHATWG HTML, "Parsing an event stream": any of the three line ends; comments skipped;
    one optional space after the colon; data lines of one event joined by LF; other fields
    ignored; an event never closed by a blank line before the end is discarded."""
    from pdctl.verify import sse_data

    stream = newline.join(
        [
            ": keep-alive",
            "event: message",
            "id: 7",
            "data: first",
            "data:second",
            "",
            "data",
            "",
            "data: [DONE]",
            "",
            "data: never closed",
        ]
    )
    pieces = [stream[i : i + 3].encode() for i in range(0, len(stream), 3)]
    assert list(sse_data(pieces)) == ["first\nsecond", "[DONE]"]


def _counts(queries: float, hits: float, sources: int = 1) -> prefix_reuse.CacheCounts:
    return prefix_reuse.CacheCounts(queries, hits, sources, seen=sources > 0)


N = 3 * BLOCK + 8  # a prompt's tokens in the rows below


@pytest.mark.parametrize(
    ("counts", "ending", "fragment"),
    [
        ((_counts(0, 0, 0),) * 3, ": cannot tell", "no prefix-cache counters on 0"),
        ((_counts(50, 0), _counts(50 + N, 0), _counts(10, 0)), ": cannot tell", "restarted"),
        (
            (_counts(50, 0), _counts(50 + N, 0), _counts(50 + 2 * N, 0, sources=2)),
            ": cannot tell",
            "restarted",
        ),
        ((_counts(0, 0), _counts(N + 0.5, 0), _counts(2 * N + 1, 0)), ": cannot tell", "whole"),
        ((_counts(0, 0), _counts(0, 0), _counts(N, 0)), ": cannot tell", "--metrics-wait"),
        ((_counts(0, 0), _counts(N, 0), _counts(2 * N + 9, 0)), ": cannot tell", "other requests"),
        ((_counts(0, 0), _counts(BLOCK, 0), _counts(2 * BLOCK, 0)), ": cannot tell", "one block"),
        ((_counts(0, 0), _counts(N, 0), _counts(2 * N, 3 * BLOCK)), ": yes", "3 whole"),
        ((_counts(0, 0), _counts(N, 0), _counts(2 * N, BLOCK)), ": partly", f"found {BLOCK} "),
    ],
)
def test_the_prefix_reuse_verdict_says_yes_only_on_whole_evidence(counts, ending, fragment):
    verdict = prefix_reuse.reuse_verdict(*counts, BLOCK, "prefix_affinity", 2)
    assert verdict.name == f"{prefix_reuse.NAME}{ending}"
    assert fragment in verdict.detail
    assert verdict.ok == (ending == ": yes")


def test_slow_transfers_inside_a_shared_node_point_at_ucx_not_the_fabric(
    serve, monkeypatch
) -> None:
    """On gpu_nodes.shared the KV never crosses EFA: a slow NIXL/UCX hand-off is UCX leaving
    cuda_ipc (the pod's UCX settings), and efa-check would measure nothing."""
    from tests.configurations import settings_for

    monkeypatch.setitem(globals(), "MODEL", settings_for("trial-one-node").serving.model.id)
    url, handler = serve
    handler.transfers_per_request, handler.seconds_per_transfer = 4, 1.5
    result = CliRunner().invoke(
        app,
        ["verify", "--config", "examples/trial-one-node.yaml", "--url", url, "--metrics-url",
         f"{url}/metrics", "--metrics-wait", "0", "--json"],
    )  # fmt: skip
    checks = json.loads(result.output)
    assert checks[-1]["name"] == "KV moved from prefill to decode over NIXL/UCX: yes, but slowly"
    assert "UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y" in checks[-1]["fix"]
    assert "pdctl efa-check" not in checks[-1]["fix"]


def test_decode_metrics_are_read_from_the_pods_decode_runs_in(monkeypatch) -> None:
    """Its own group's pods, or the shared pods where decode runs beside prefill."""
    import sys
    import types

    from pdctl import kube, verify
    from tests.configurations import settings_for

    selectors = []

    class Core:
        def list_namespaced_pod(self, namespace, label_selector, _request_timeout):
            selectors.append(label_selector)
            return types.SimpleNamespace(items=[])

    fake = types.ModuleType("kubernetes")
    fake.client = types.SimpleNamespace(CoreV1Api=Core)
    monkeypatch.setitem(sys.modules, "kubernetes", fake)
    monkeypatch.setattr(kube, "load_kubeconfig", lambda settings: None)
    for example, group in (("default", "decode"), ("trial-one-node", "shared")):
        settings = settings_for(example)
        assert verify.worker_metrics_from_kubernetes(settings, 8080, 5) == []
        assert selectors.pop() == (
            f"llm-serving/rayservice={settings.serving.name},llm-serving/role={group}"
        )
