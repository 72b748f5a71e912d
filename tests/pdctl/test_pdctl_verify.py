"""pdctl verify against a local server that speaks OpenAI streaming and Prometheus text."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from app_config import load_settings
from pdctl.cli import app
from tests.configurations import context_for
from tests.pdctl.openai_stream import DONE, chunk, sse_event

MODEL = load_settings(context_for("default")).serving.model.id


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
    old failure) and grow by what each completion does."""

    transfers_at_start, failed_at_start = 8, 1
    absent_until_first_transfer = False
    transfers_per_request, failed_per_request = 0, 0
    requests = 0
    seconds_per_transfer = 0.002
    # Like Ray's periodic export: a completion shows in the metrics only from this many reads
    # after it on.
    export_lag_reads = 0
    reads_since_request = 0

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            body = {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "ray"}],
            }
            self._send(json.dumps(body).encode(), "application/json")
        else:
            cls = type(self)
            cls.reads_since_request += 1
            pending = cls.requests > 0 and cls.reads_since_request <= cls.export_lag_reads
            exported = cls.requests - pending
            transfers = cls.transfers_at_start + exported * cls.transfers_per_request
            failed = cls.failed_at_start + exported * cls.failed_per_request
            # Ray exports a series only after its first increment: a decode worker that has
            # handed off nothing yet (no pre-warm, no request) shows no NIXL metric at all.
            born = transfers or failed or not cls.absent_until_first_transfer
            text = _metrics(transfers, failed, cls.seconds_per_transfer) if born else ""
            self._send(text.encode(), "text/plain; version=0.0.4")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests += 1
        type(self).reads_since_request = 0
        events = [sse_event(chunk(MODEL, role="assistant", content=""))]
        events += [sse_event(chunk(MODEL, content=word)) for word in ("Hello", " there", "!")]
        events += [sse_event(chunk(MODEL, content="", finish_reason="stop")), DONE]
        self._send("".join(events).encode(), "text/event-stream")


@pytest.fixture
def serve() -> Iterator[tuple[str, type[FakeServe]]]:
    handler = type("Handler", (FakeServe,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


def _verify(url: str, metrics_wait: float = 0) -> tuple[int, list[dict]]:
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
            "--json",
        ],
    )
    return result.exit_code, json.loads(result.output)


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
    handler.transfers_per_request, handler.export_lag_reads = 3, 2
    code, checks = _verify(url, metrics_wait=10)
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
    handler.transfers_per_request, handler.export_lag_reads = 3, 2
    code, checks = _verify(url, metrics_wait)
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
        assert verify.decode_metrics_from_kubernetes(settings, 8080, 5) == []
        assert selectors.pop() == (
            f"llm-serving/rayservice={settings.serving.name},llm-serving/role={group}"
        )
