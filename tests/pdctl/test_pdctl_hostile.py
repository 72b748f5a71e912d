"""pdctl against what it must survive: endpoints that answer badly, hang or reset, metrics that
are not metrics, counters that reset, and model configs that are not model configs. Each ends in
a clear message and a non-zero exit, within a bounded time, never a traceback."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdctl.cli import app
from tests.configurations import PROJECT_ROOT, settings_for
from tests.pdctl.test_pdctl_plan import QWEN3_32B

MODEL = settings_for("default").serving.model.id
TIMEOUT = 1.0  # --timeout for these runs: every wait must end within a few of these


def _models_body(models: list[str]) -> bytes:
    data = [{"id": m, "object": "model", "created": 0, "owned_by": "ray"} for m in models]
    return json.dumps({"object": "list", "data": data}).encode()


def _chunk(word: str) -> str:
    body = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
    }
    return f"data: {json.dumps(body)}\n\n"


def _metrics(transfers: int) -> bytes:
    return (
        "# TYPE ray_vllm:nixl_xfer_time_seconds histogram\n"
        f'ray_vllm:nixl_xfer_time_seconds_bucket{{le="+Inf"}} {transfers}\n'
        f"ray_vllm:nixl_xfer_time_seconds_count {transfers}\n"
        f"ray_vllm:nixl_xfer_time_seconds_sum {transfers * 0.01}\n"
    ).encode()


class Handler(BaseHTTPRequestHandler):
    """A well-behaved endpoint; each scenario overrides one answer."""

    protocol_version = "HTTP/1.1"
    metrics_reads = 0

    def log_message(self, *args) -> None:
        pass

    def send(self, body: bytes, content_type: str, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self.models()
        else:
            type(self).metrics_reads += 1
            self.metrics(type(self).metrics_reads)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.completion()

    def models(self) -> None:
        self.send(_models_body([MODEL]), "application/json")

    def completion(self) -> None:
        body = "".join(_chunk(w) for w in ("a", "b")) + "data: [DONE]\n\n"
        self.send(body.encode(), "text/event-stream")

    def metrics(self, read: int) -> None:
        self.send(_metrics(5 + 2 * read), "text/plain")


def html_models(self: Handler) -> None:
    self.send(b"<html><body>Bad gateway</body></html>", "text/html")


def no_models(self: Handler) -> None:
    self.send(_models_body([]), "application/json")


def server_error(self: Handler) -> None:
    self.send(b'{"error": {"message": "boom"}}', "application/json", status=503)


def truncated_stream(self: Handler) -> None:
    body = _chunk("a").encode()
    self.send_response(200)
    self.send_header("Content-Type", "text/event-stream")
    self.send_header("Content-Length", str(len(body) * 10))  # promises more than it sends
    self.end_headers()
    self.wfile.write(body)
    self.wfile.flush()
    self.connection.shutdown(socket.SHUT_RDWR)


def garbage_stream(self: Handler) -> None:
    self.send(b"data: {not json}\n\ndata: [DONE]\n\n", "text/event-stream")


def slow_completion(self: Handler) -> None:
    time.sleep(8 * TIMEOUT)


def reset_completion(self: Handler) -> None:
    self.connection.setsockopt(
        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
    )
    self.connection.close()


def garbage_metrics(self: Handler, read: int) -> None:
    self.send(b"this is { not prometheus text", "text/plain")


def resetting_counter(self: Handler, read: int) -> None:
    self.send(_metrics(50 if read == 1 else 3), "text/plain")  # a decode worker restarted


def no_nixl_metrics(self: Handler, read: int) -> None:
    self.send(b"# TYPE up gauge\nup 1\n", "text/plain")


def hanging_metrics(self: Handler, read: int) -> None:
    time.sleep(8 * TIMEOUT)


SCENARIOS: dict[str, tuple[str, Callable, str]] = {
    # name: (handler method, behaviour, fragment of the one line or verdict)
    "html instead of JSON": ("models", html_models, "listing models failed"),
    "no model served": ("models", no_models, "wait for the RayService"),
    "server error": ("models", server_error, "HTTP 503"),
    "truncated stream": ("completion", truncated_stream, "streamed completion failed"),
    "stream of garbage": ("completion", garbage_stream, "streamed completion failed"),
    "slow answer": ("completion", slow_completion, "no answer within the timeout"),
    "connection reset": ("completion", reset_completion, "streamed completion failed"),
    "metrics that are not metrics": ("metrics", garbage_metrics, "not Prometheus text"),
    "counter that resets": ("metrics", resetting_counter, "cannot tell"),
    "no NIXL metrics": ("metrics", no_nixl_metrics, "cannot tell"),
    "hanging metrics": ("metrics", hanging_metrics, "metrics"),
}


@pytest.fixture
def endpoint(request) -> Iterator[str]:
    method, behaviour, _ = SCENARIOS[request.param]
    handler = type("Scenario", (Handler,), {method: behaviour, "metrics_reads": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _run(args: list[str]) -> tuple[int, str, float]:
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    elapsed = time.monotonic() - started
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output, elapsed


@pytest.mark.parametrize("endpoint", list(SCENARIOS), indirect=True)
def test_verify_ends_clearly_and_in_bounded_time(endpoint: str, request) -> None:
    _, _, fragment = SCENARIOS[request.node.callspec.params["endpoint"]]
    code, output, elapsed = _run(
        [
            "verify",
            "--url",
            endpoint,
            "--metrics-url",
            f"{endpoint}/metrics",
            "--timeout",
            str(TIMEOUT),
        ]
    )
    assert code != 0
    assert "Traceback" not in output
    assert fragment in " ".join(output.split()), output
    assert elapsed < 6 * TIMEOUT + 3


def test_verify_of_an_address_nobody_listens_on_is_one_line() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    code, output, elapsed = _run(
        ["verify", "--url", f"http://127.0.0.1:{port}", "--timeout", str(TIMEOUT)]
    )
    assert code == 1
    assert "connection failed" in " ".join(output.split())
    assert len(output.strip().splitlines()) <= 3  # one message, wrapped by the terminal width
    assert elapsed < 5


CONFIGS = [
    ({"num_hidden_layers": float("nan")}, "NaN is not a number"),
    ({"num_hidden_layers": "64"}, "num_hidden_layers"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"num_hidden_layers": True}, "num_hidden_layers"),
    ({"hidden_size": -5120}, "hidden_size"),
    ({"num_key_value_heads": 7}, "does not divide"),
    ({"num_attention_heads": None}, "num_attention_heads is missing"),
    ({"torch_dtype": "int3"}, "dtype"),
    ({"text_config": "llama"}, "text_config"),
    ({"num_experts": 8, "num_experts_per_tok": 9}, "exceeds"),
]


def _qwen(**changes: object) -> dict:
    config = dict(QWEN3_32B)
    config.update(changes)
    return {k: v for k, v in config.items() if v is not None}


@pytest.mark.parametrize(("change", "fragment"), CONFIGS, ids=[f for _, f in CONFIGS])
def test_plan_refuses_what_is_not_a_model_config(
    change: dict, fragment: str, tmp_path: Path
) -> None:
    config = _qwen(**change)
    if change.get("num_attention_heads", 0) is None:
        config.pop("num_attention_heads", None)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))  # json writes NaN as NaN, as a careless tool would
    code, output, _ = _run(["plan", "--model-config", str(path)])
    assert code == 2
    assert "Traceback" not in output
    assert fragment in " ".join(output.split()), output


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("{not json", "not valid JSON"), ("[1, 2]", "expected a JSON object"), ("", "not valid")],
)
def test_plan_refuses_files_that_are_not_json_objects(
    text: str, fragment: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    code, output, _ = _run(["plan", "--model-config", str(path)])
    assert code == 2
    assert fragment in " ".join(output.split()), output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--tensor-parallel", "0"], "--tensor-parallel"),  # typer's own range check
        (["--tensor-parallel", "16"], "needs 16 GPUs"),
        (["--tensor-parallel", "3"], "does not divide"),
    ],
)
def test_plan_refuses_parallelism_that_cannot_run(
    args: list[str], fragment: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_qwen()))
    code, output, _ = _run(["plan", "--model-config", str(path), *args])
    assert code == 2
    assert fragment in " ".join(output.split()), output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["cost"], "pdctl: AWS: Unable to locate credentials"),
        (["preflight"], "pdctl: AWS: Unable to locate credentials"),
        (["verify", "--timeout", "1"], "pdctl: AWS: Unable to locate credentials"),
        (["bench"], "pdctl: Kubernetes: ConfigException"),
    ],
)
def test_no_credentials_and_no_kubeconfig_are_one_line(
    args: list[str], fragment: str, tmp_path: Path
) -> None:
    """What a new user meets first: the command as installed, without AWS credentials or a
    kubeconfig, says so in one line instead of a traceback."""
    import os
    import subprocess
    import sys

    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AWS_") and key != "KUBECONFIG"
    }
    env.update(
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        KUBECONFIG=str(tmp_path / "none"),
        HOME=str(tmp_path),
        COLUMNS="200",
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pdctl.cli", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    assert fragment in " ".join(output.split()), output
    assert time.monotonic() - started < 30
