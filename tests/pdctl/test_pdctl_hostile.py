"""`pdctl verify` against endpoints that misbehave byte by byte (tests/pdctl/hostile_server.py),
by class of mistake, each row a misbehaviour, the exit code it must give and a fragment of the
message:

- streams that do not end as the OpenAI protocol ends one (vLLM 0.26's writer:
  tests/pdctl/openai_stream.py): never a pass; exit 1;
- answers that are not what they claim (not JSON, NaN, deep nesting, wrong types): one line,
  exit 1;
- calls that never finish (trickled headers or bodies, keep-alive comments, tokens that never
  end): each ends within --timeout as a whole;
- metrics that cannot decide (not finite, negative, a count not whole, time that did not grow
  with the count, a restart): "cannot tell", exit 2, never "yes";
- nothing listening: exit 2.
Text from the server is printed as text: markup and control characters stay inert.
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Callable

import pytest
from prometheus_client.utils import floatToGoString
from typer.testing import CliRunner

from pdctl import output, verify
from pdctl.cli import app
from tests.configurations import settings_for
from tests.pdctl.hostile_server import Connection, Request, chunked, hostile_server
from tests.pdctl.openai_stream import DONE, chunk, sse_event, whole_stream

MODEL = settings_for("default").serving.model.id
TIMEOUT = 1.0  # --timeout of these runs
BOUND = 4 * TIMEOUT + 4  # models, metrics before, stream, metrics after: one timeout each
TRICKLE = 0.2  # seconds between bytes: far below the timeout, so every read succeeds


def models_ok(conn: Connection, request: Request) -> None:
    conn.respond_json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})


def stream_ok(conn: Connection, request: Request) -> None:
    conn.respond(whole_stream(MODEL), "text/event-stream")


def nixl_metrics(count: float, seconds: float, failed: float = 0.0) -> str:
    """Ray's export of vLLM's NIXL metrics, values printed as prometheus_client prints them."""
    value = floatToGoString
    return (
        "# HELP ray_vllm:nixl_xfer_time_seconds Transfer duration\n"
        "# TYPE ray_vllm:nixl_xfer_time_seconds histogram\n"
        f'ray_vllm:nixl_xfer_time_seconds_bucket{{le="+Inf",model_name="m"}} {value(count)}\n'
        f'ray_vllm:nixl_xfer_time_seconds_count{{model_name="m"}} {value(count)}\n'
        f'ray_vllm:nixl_xfer_time_seconds_sum{{model_name="m"}} {value(seconds)}\n'
        "# HELP ray_vllm:nixl_num_failed_transfers Failed transfers\n"
        "# TYPE ray_vllm:nixl_num_failed_transfers counter\n"
        f'ray_vllm:nixl_num_failed_transfers_total{{model_name="m"}} {value(failed)}\n'
    )


def metrics_moving(before: tuple, after: tuple) -> Callable[[Connection, Request], None]:
    """The first read (before the completion) and every later one."""

    def route(conn: Connection, request: Request) -> None:
        conn.respond(nixl_metrics(*(before if request.index == 0 else after)), "text/plain")

    return route


HEALTHY_METRICS = metrics_moving((8, 0.016), (11, 0.022))


def _stream(*events: str) -> Callable[[Connection, Request], None]:
    def route(conn: Connection, request: Request) -> None:
        conn.respond("".join(events), "text/event-stream")

    return route


def _first_words(model: str = MODEL) -> list[str]:
    return [
        sse_event(chunk(model, role="assistant", content="")),
        sse_event(chunk(model, content="Hello")),
        sse_event(chunk(model, content=" there")),
    ]


def cut_after_two_tokens(conn: Connection, request: Request) -> None:
    conn.headers_only()
    conn.send("".join(_first_words()))  # then the connection closes: no finish, no [DONE]


def cut_mid_chunk(conn: Connection, request: Request) -> None:
    conn.headers_only(chunked=True)
    for event in _first_words():
        conn.send(chunked(event))
    conn.send(b"400\r\ndata: {")  # a chunk that promises 1 KiB and ends


def done_without_finish(conn: Connection, request: Request) -> None:
    conn.respond("".join(_first_words()) + DONE, "text/event-stream")


def finish_without_done(conn: Connection, request: Request) -> None:
    stop = sse_event(chunk(MODEL, content="", finish_reason="stop"))
    conn.respond("".join(_first_words()) + stop, "text/event-stream")


def done_without_blank_line(conn: Connection, request: Request) -> None:
    stop = sse_event(chunk(MODEL, content="", finish_reason="stop"))
    conn.respond("".join(_first_words()) + stop + "data: [DONE]", "text/event-stream")


def keep_alive_for_ever(conn: Connection, request: Request) -> None:
    conn.headers_only()
    conn.send("".join(_first_words()))
    for _ in range(200):  # a comment every TRICKLE seconds, for 40 s at most
        if not conn.send(": keep-alive\n\n"):
            return
        conn.stop.wait(TRICKLE)


def tokens_for_ever(conn: Connection, request: Request) -> None:
    conn.headers_only()
    for _ in range(200):
        if not conn.send(sse_event(chunk(MODEL, content="a"))):
            return
        conn.stop.wait(TRICKLE)


def trickled_headers(conn: Connection, request: Request) -> None:
    conn.trickle("HTTP/1.1 200 OK\r\n" + "X-Pad: " + "a" * 400 + "\r\n\r\n", TRICKLE)


def trickled_body(conn: Connection, request: Request) -> None:
    body = json.dumps({"object": "list", "data": [{"id": MODEL}]}) + " " * 400
    conn.send(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n")
    conn.trickle(body, TRICKLE)


def silent(conn: Connection, request: Request) -> None:
    conn.stop.wait(20)


def respond(body: str, content_type: str = "application/json", status: str = "200 OK"):
    def route(conn: Connection, request: Request) -> None:
        conn.respond(body, content_type, status)

    return route


def metrics_text(text: str):
    return respond(text, "text/plain")


DEEP = "[" * 100_000 + "]" * 100_000
ERROR_EVENT = sse_event({"error": {"message": "engine dead", "type": "InternalServerError"}})
STOP = sse_event(chunk(MODEL, content="", finish_reason="stop"))

# name: (route, behaviour, exit code, fragment of the message or of the verdict)
SCENARIOS: dict[str, tuple[str, Callable, int, str]] = {
    # Streams that did not end as the protocol ends one.
    "cut after two tokens": ("/v1/chat", cut_after_two_tokens, 1, "cut short"),
    "cut inside a chunk": ("/v1/chat", cut_mid_chunk, 1, "streamed completion failed"),
    "[DONE] without finish_reason": ("/v1/chat", done_without_finish, 1, "no finish_reason"),
    "finish_reason without [DONE]": ("/v1/chat", finish_without_done, 1, "without [DONE]"),
    "[DONE] never dispatched": ("/v1/chat", done_without_blank_line, 1, "without [DONE]"),
    "finish_reason abort": (
        "/v1/chat",
        _stream(*_first_words(), sse_event(chunk(MODEL, finish_reason="abort")), DONE),
        1,
        "finish_reason 'abort'",
    ),
    "error event mid-stream": (
        "/v1/chat",
        _stream(*_first_words(), ERROR_EVENT),
        1,
        "engine dead",
    ),
    "no tokens at all": ("/v1/chat", _stream(STOP, DONE), 1, "streamed no tokens"),
    "event that is not JSON": ("/v1/chat", _stream("data: {nope\n\n", STOP, DONE), 1, "not JSON"),
    "event with NaN": (
        "/v1/chat",
        _stream('data: {"choices": NaN}\n\n', STOP, DONE),
        1,
        "NaN is not a JSON number",
    ),
    "event nested too deeply": (
        "/v1/chat",
        _stream(f"data: {DEEP}\n\n", STOP, DONE),
        1,
        "nested too deeply",
    ),
    "choices that are not a list": (
        "/v1/chat",
        _stream('data: {"choices": {"0": 1}}\n\n', STOP, DONE),
        1,
        "'choices' list",
    ),
    "content that is not text": (
        "/v1/chat",
        _stream(sse_event(chunk(MODEL, content=7)), STOP, DONE),  # type: ignore[arg-type]
        1,
        "not text",
    ),
    "a whole JSON answer instead of a stream": (
        "/v1/chat",
        respond(json.dumps({"choices": [{"message": {"content": "hi"}}]})),
        1,
        "answered application/json, not a stream (text/event-stream)",
    ),
    "HTTP 500 with markup in the body": (
        "/v1/chat",
        respond('{"error": {"message": "[bold red]boom[/] \\u001b[2J"}}', status="500 Oops"),
        1,
        "[bold red]boom[/] \\x1b[2J",
    ),
    # Answers that are not what they claim to be.
    "models as HTML": (
        "/v1/models",
        respond("<html>Bad gateway</html>", "text/html"),
        1,
        "not JSON",
    ),
    "models without data": ("/v1/models", respond('{"object": "list"}'), 1, "'data' list"),
    "a model without an id": ("/v1/models", respond('{"data": [{"object": "model"}]}'), 1, "'id'"),
    "a model id that is a number": ("/v1/models", respond('{"data": [{"id": 7}]}'), 1, "'id'"),
    "models nested too deeply": ("/v1/models", respond(DEEP), 1, "nested too deeply"),
    "models with Infinity": ("/v1/models", respond('{"data": Infinity}'), 1, "not a JSON number"),
    "models 503": ("/v1/models", respond('{"error": "warming"}', status="503 No"), 1, "HTTP 503"),
    # Calls that never finish: each ends within its timeout.
    "trickled headers": ("/v1/models", trickled_headers, 1, "within 1 s"),
    "trickled body": ("/v1/models", trickled_body, 1, "within 1 s"),
    "silence": ("/v1/models", silent, 1, "within 1 s"),
    "keep-alive comments for ever": ("/v1/chat", keep_alive_for_ever, 1, "within 1 s"),
    "tokens for ever": ("/v1/chat", tokens_for_ever, 1, "within 1 s"),
    "trickled metrics": ("/metrics", trickled_headers, 2, "cannot tell"),
    # Metrics that cannot decide: never yes.
    "infinite transfer count": (
        "/metrics",
        metrics_moving((8, 0.016), (math.inf, 0.022)),
        2,
        "not a count",
    ),
    "NaN transfer count": (
        "/metrics",
        metrics_moving((8, 0.016), (math.nan, 0.1)),
        2,
        "not a count",
    ),
    "negative transfer time": (
        "/metrics",
        metrics_moving((8, 0.016), (11, -0.5)),
        2,
        "not a count",
    ),
    "transfer time going down": (
        "/metrics",
        metrics_moving((8, 0.016), (11, 0.010)),
        2,
        "restarted",
    ),
    "transfers that took no time": (
        "/metrics",
        metrics_moving((8, 0.016), (11, 0.016)),
        2,
        "positive transfer time",
    ),
    "a fraction of a transfer": (
        "/metrics",
        metrics_moving((8, 0.016), (8.5, 0.02)),
        2,
        "not whole counts",
    ),
    "counter that resets": ("/metrics", metrics_moving((50, 1.0), (3, 0.1)), 2, "restarted"),
    "no NIXL metrics": ("/metrics", metrics_text("# TYPE up gauge\nup 1\n"), 2, "no NIXL metrics"),
    "metrics that are not metrics": (
        "/metrics",
        metrics_text("this is { not prometheus"),
        2,
        "not Prometheus text",
    ),
    "metrics 500": ("/metrics", respond("oops", "text/plain", "500 No"), 2, "HTTP 500"),
    "failed transfers": (
        "/metrics",
        metrics_moving((8, 0.016, 1), (11, 0.022, 2)),
        1,
        "1 failed",
    ),
}


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Table cells unwrapped, so that a fragment is found whatever the terminal."""
    for console in (output.stdout, output.stderr):
        # _width, not width: undoing `width` would pin every later test to the width read here
        monkeypatch.setattr(console, "_width", 400)


def _run(args: list[str]) -> tuple[int, str, float]:
    started = time.monotonic()
    result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    elapsed = time.monotonic() - started
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output, elapsed


def _verify(url: str, *extra: str) -> tuple[int, str, float]:
    return _run(
        [
            "verify",
            "--url",
            url,
            "--metrics-url",
            f"{url}/metrics",
            "--timeout",
            str(TIMEOUT),
            "--metrics-wait",
            "0",
            *extra,
        ]
    )


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_verify_never_passes_on_broken_evidence_and_ends_in_time(scenario: str) -> None:
    path, behaviour, expected_code, fragment = SCENARIOS[scenario]
    routes = {
        "/v1/models": models_ok,
        "/v1/chat": stream_ok,
        "/metrics": HEALTHY_METRICS,
        path: behaviour,
    }
    with hostile_server(routes) as url:
        code, output, elapsed = _verify(url)
    assert code == expected_code, output
    assert "Traceback" not in output
    assert ": yes" not in output
    assert fragment in " ".join(output.split()), output
    assert "\x1b" not in output  # control characters from the server are shown escaped
    assert elapsed < BOUND, f"{elapsed:.1f} s"


def test_the_healthy_server_of_this_suite_passes() -> None:
    """The scenarios above differ from this one by one misbehaviour each."""
    routes = {"/v1/models": models_ok, "/v1/chat": stream_ok, "/metrics": HEALTHY_METRICS}
    with hostile_server(routes) as url:
        code, output, _ = _verify(url, "--json")
    assert code == 0, output
    assert json.loads(output)[-1]["name"].endswith(": yes")


def test_a_stream_split_at_every_byte_still_counts() -> None:
    """Line ends and events may fall anywhere in the reads (CRLF split across two)."""
    body = whole_stream(MODEL).replace("\n", "\r\n")

    def byte_by_byte(conn: Connection, request: Request) -> None:
        conn.headers_only()
        for index in range(len(body)):
            conn.send(body[index : index + 1])

    routes = {"/v1/models": models_ok, "/v1/chat": byte_by_byte, "/metrics": HEALTHY_METRICS}
    with hostile_server(routes) as url:
        code, output, _ = _verify(url)
    assert code == 0, output


def test_model_names_with_markup_and_escapes_print_as_text() -> None:
    shown = "[red]evil[/red] :warning: \x1b[2J"

    def models(conn: Connection, request: Request) -> None:
        conn.respond_json({"data": [{"id": shown}]})

    with hostile_server({"/v1/models": models}) as url:
        code, output, _ = _verify(url)
    assert code == 1  # the configured model is not listed
    flat = " ".join(output.split())
    assert "[red]evil[/red] :warning: \\x1b[2J" in flat, output
    assert "\x1b" not in output


def test_errors_go_to_stderr_as_json_under_json() -> None:
    with hostile_server({"/v1/models": cut_after_two_tokens}) as url:
        result = CliRunner().invoke(
            app, ["verify", "--url", url, "--metrics-url", url, "--timeout", "1", "--json"]
        )
    assert result.exit_code == 1
    assert result.stdout == ""
    error = json.loads(result.stderr)
    assert set(error) == {"error", "hint", "exit_code"}
    assert error["exit_code"] == 1


def test_an_address_nobody_listens_on_cannot_run() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    code, output, elapsed = _run(
        ["verify", "--url", f"http://127.0.0.1:{port}", "--timeout", str(TIMEOUT)]
    )
    assert code == 2
    assert "connection failed" in " ".join(output.split())
    assert len(output.strip().splitlines()) <= 2  # the message and its fix
    assert elapsed < 5


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "http://", "http://127.0.0.1:99999"])
def test_urls_that_cannot_be_called_are_one_line(url: str) -> None:
    code, output, _ = _run(["verify", "--url", url, "--timeout", "1"])
    assert code in (1, 2)
    assert "Traceback" not in output
    assert len(output.strip().splitlines()) <= 2


def test_decode_metrics_without_a_kubeconfig_cannot_tell_and_say_how_to_get_one(tmp_path) -> None:
    """Pages that cannot be read at all end each metrics check at once: nothing waits out
    Ray's report interval for a reading that can never come."""
    routes = {"/v1/models": models_ok, "/v1/chat": stream_ok}
    started = time.monotonic()
    with hostile_server(routes) as url:
        result = CliRunner().invoke(
            app,
            ["verify", "--url", url, "--timeout", "1", "--json"],
            env={"KUBECONFIG": str(tmp_path / "none")},
        )
    assert time.monotonic() - started < verify.METRICS_REPORT_INTERVAL_SECONDS
    assert result.exit_code == 2, result.output
    kv = json.loads(result.stdout)[-1]
    assert kv["inconclusive"] is True
    assert "no usable kubeconfig" in kv["detail"]
    assert "aws eks update-kubeconfig --name" in kv["fix"]


def _kube_routes(metrics: Callable[[Connection, Request], None]) -> dict:
    """The decode pods and their metrics through the API server's pod proxy, as the real
    kubernetes client asks for them; no prefill pod answers its side's label selector."""
    namespace = settings_for("default").serving.namespace
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def pod_list(conn: Connection, request: Request) -> None:
        decode = "llm-serving%2Frole%3Ddecode" in request.path
        items = [{"metadata": {"name": "decode-0"}, "status": {"phase": "Running"}}]
        conn.respond_json({"kind": "PodList", "apiVersion": "v1", "items": items if decode else []})

    return {pods: pod_list, f"{pods}/": metrics}


@pytest.mark.parametrize(
    ("metrics", "code", "fragment"),
    [
        # Exit 2: the prefix-reuse line cannot tell without a prefill pod (asserted below).
        (HEALTHY_METRICS, 2, "KV moved from prefill to decode over NIXL/LIBFABRIC: yes"),
        (metrics_moving((8, 0.016), (math.inf, 0.022)), 2, "not a count"),
        (trickled_headers, 2, "no complete answer within 1 s"),
    ],
    ids=["healthy", "infinite-count", "trickled-proxy"],
)
def test_decode_metrics_through_the_kubernetes_api_follow_the_same_rules(
    metrics, code, fragment, tmp_path
) -> None:
    routes = {"/v1/models": models_ok, "/v1/chat": stream_ok, **_kube_routes(metrics)}
    with hostile_server(routes) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": url}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        started = time.monotonic()
        result = CliRunner().invoke(
            app,
            ["verify", "--url", url, "--timeout", "1", "--metrics-wait", "0"],
            env={"KUBECONFIG": str(kubeconfig)},
        )
    assert result.exit_code == code, result.output
    flat = " ".join(result.output.split())
    assert fragment in flat
    assert "no prefix-cache counters on 0 endpoint(s)" in flat
    assert time.monotonic() - started < BOUND
