"""pdctl signs requests to the IAM-authenticated model API as API Gateway checks them: SigV4 for
execute-api in the URL's region, over the bytes actually sent (a streamed completion's POST)."""

from __future__ import annotations

import datetime
import http.server
import json
import threading

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from pdctl import http_call, sigv4

URL = "https://a1b2c3d4e5-vpce-0123456789abcdef0.execute-api.eu-north-1.amazonaws.com/api"
KEYS = {
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_SESSION_TOKEN": "t",
}


@pytest.mark.parametrize(
    ("url", "region"),
    [
        (URL, "eu-north-1"),
        ("https://a1b2c3d4e5.execute-api.us-west-2.amazonaws.com/api", "us-west-2"),
        ("http://internal-pd-llm-123.elb.us-west-2.amazonaws.com:80", None),
        ("http://localhost:8000", None),
        ("https://execute-api.us-west-2.amazonaws.com.evil.example/api", None),
    ],
)
def test_only_api_gateway_urls_are_signed(url: str, region: str | None) -> None:
    assert sigv4.execute_api_region(url) == region


def test_a_post_is_signed_over_the_bytes_pdctl_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through pdctl's one HTTP layer to a local server standing in for API Gateway: the
    signature recomputed from what arrived matches only if the body sent was the body signed."""
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    now = datetime.datetime(2026, 12, 1, 12, 0, 0)  # one clock for signing and recomputing
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now)
    received: dict[str, object] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received["headers"] = {k.lower(): v for k, v in self.headers.items()}
            received["body"] = self.rfile.read(int(self.headers["Content-Length"]))
            received["path"] = self.path
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/api/v1/chat/completions"
    # The local stand-in is not an execute-api host: treat it as one in eu-north-1.
    monkeypatch.setattr(sigv4, "execute_api_region", lambda _: "eu-north-1")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with http_call.open_response(
        "POST", url, http_call.Deadline(5), body, {"Content-Type": "application/json"}
    ) as response:
        assert response.status == 200
    thread.join(5)
    server.server_close()
    headers = received["headers"]
    authorization = headers["authorization"]
    scope = authorization.split("Credential=")[1].split(",")[0].split("/")
    assert scope[2:4] == ["eu-north-1", "execute-api"]
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    again = AWSRequest(
        method="POST",
        url=url,
        data=received["body"],
        headers={name: headers[name] for name in signed if name != "x-amz-date"},
    )
    SigV4Auth(Credentials("AKIDEXAMPLE", "secret", "t"), "execute-api", "eu-north-1").add_auth(
        again
    )
    assert again.headers["Authorization"] == authorization
    assert received["body"] == body


def test_without_credentials_a_signed_endpoint_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    for name in (*KEYS, "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with (
        pytest.raises(http_call.HttpCallError, match="no AWS credentials"),
        http_call.open_response("GET", URL + "/v1/models", http_call.Deadline(2)),
    ):
        pass
