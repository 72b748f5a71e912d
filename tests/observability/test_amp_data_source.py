"""The CloudWatch data source Lambda against a local stand-in for the workspace's Prometheus API:
what it sends (a SigV4-signed query_range for the aps service), and what CloudWatch gets back."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from functions.amp_data_source import handler

START, END, PERIOD = 1_700_000_000, 1_700_000_600, 60
QUERY = 'histogram_quantile(0.95, sum by (le) (rate(x_bucket{role="decode"}[5m])))'


class FakeWorkspace(BaseHTTPRequestHandler):
    """Records each request; answers with the class's (status, body)."""

    requests: list[dict] = []
    answer: tuple[int, dict] = (200, {})

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        FakeWorkspace.requests.append(
            {"path": self.path, "form": form, "authorization": self.headers["Authorization"]}
        )
        status, body = FakeWorkspace.answer
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def workspace(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeWorkspace]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeWorkspace)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("WORKSPACE_URL", f"http://127.0.0.1:{server.server_port}/workspaces/ws-1")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    FakeWorkspace.requests = []
    yield FakeWorkspace
    server.shutdown()


def _event(*arguments: object) -> dict:
    return {
        "EventType": "GetMetricData",
        "GetMetricDataRequest": {
            "StartTime": START,
            "EndTime": END,
            "Period": PERIOD,
            "Arguments": list(arguments),
        },
    }


def test_runs_a_signed_range_query_over_cloudwatchs_window_and_period(workspace) -> None:
    workspace.answer = (200, {"status": "success", "data": {"resultType": "matrix", "result": []}})
    assert handler.handler(_event(QUERY)) == {"MetricDataResults": []}
    (request,) = workspace.requests
    assert request["path"] == "/workspaces/ws-1/api/v1/query_range"
    assert request["form"] == {
        "query": [QUERY],
        "start": [str(START)],
        "end": [str(END)],
        "step": [str(PERIOD)],
    }
    assert request["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-west-2/aps/aws4_request" in request["authorization"]


def test_turns_each_series_into_a_cloudwatch_series_without_nan(workspace) -> None:
    series = [
        {"metric": {}, "values": [[START, "0.25"], [START + 60, "NaN"], [START + 120, "0.5"]]},
        {"metric": {"role": "decode", "pod": "p"}, "values": [[START, "+Inf"], [END, "3"]]},
    ]
    workspace.answer = (200, {"status": "success", "data": {"result": series}})
    results = handler.handler(_event(QUERY))["MetricDataResults"]
    assert results == [
        {
            "StatusCode": "Complete",
            "Label": "",
            "Timestamps": [START, START + 120],
            "Values": [0.25, 0.5],
        },
        {
            "StatusCode": "Complete",
            "Label": "pod=p,role=decode",
            "Timestamps": [END],
            "Values": [3.0],
        },
    ]


def test_reports_a_query_prometheus_rejects_as_a_validation_error(workspace) -> None:
    workspace.answer = (400, {"status": "error", "error": "parse error: unclosed left parenthesis"})
    answer = handler.handler(_event("sum(rate(x[5m])"))
    assert answer["Error"]["Code"] == "Validation"
    assert "unclosed left parenthesis" in answer["Error"]["Value"]


def test_reports_a_failed_evaluation_the_workspace_answers_with_200(workspace) -> None:
    workspace.answer = (200, {"status": "error", "error": "query timed out"})
    answer = handler.handler(_event(QUERY))
    assert answer["Error"] == {"Code": "Validation", "Value": "query timed out"}


def test_reports_an_unreachable_workspace_as_an_internal_error(monkeypatch) -> None:
    monkeypatch.setenv("WORKSPACE_URL", "http://127.0.0.1:9/workspaces/ws-1")  # discard port
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    answer = handler.handler(_event(QUERY))
    assert answer["Error"]["Code"] == "InternalError"
    assert "unreachable" in answer["Error"]["Value"]


def test_reports_missing_permission_as_forbidden(workspace) -> None:
    workspace.answer = (403, {"message": "not authorized to perform aps:QueryMetrics"})
    assert handler.handler(_event(QUERY))["Error"]["Code"] == "Forbidden"


@pytest.mark.parametrize("arguments", [(), ("",), (QUERY, "extra"), (42,)])
def test_needs_exactly_one_query(arguments: tuple) -> None:
    assert handler.handler(_event(*arguments))["Error"]["Code"] == "Validation"


def test_describes_itself_for_the_console_query_builder() -> None:
    answer = handler.handler({"EventType": "DescribeGetMetricData"})
    assert "PromQL" in answer["Description"]
    assert answer["ArgumentDefaults"] == [{"Value": "up"}]
