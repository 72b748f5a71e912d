"""pdctl signs requests to the IAM-authenticated model API as API Gateway checks them: SigV4 for
execute-api in the URL's region, over the bytes actually sent (a streamed completion's POST)."""

from __future__ import annotations

import datetime
import json

import httpx2
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from pdctl import sigv4, verify

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


def test_a_post_is_signed_over_its_body_for_execute_api(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    # One clock for the signature and its recomputation below.
    now = datetime.datetime(2026, 12, 1, 12, 0, 0)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now)
    received: list[httpx2.Request] = []

    def server(request: httpx2.Request) -> httpx2.Response:
        received.append(request)
        return httpx2.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [],
            },
        )

    client = verify.client_for(URL, 5)
    client._client._transport = httpx2.MockTransport(server)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    (request,) = received
    authorization = request.headers["authorization"]
    scope = authorization.split("Credential=")[1].split(",")[0].split("/")
    assert scope[2:4] == ["eu-north-1", "execute-api"]
    # Recompute the signature from what arrived: it matches only if the body sent was signed.
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    again = AWSRequest(
        method=request.method,
        url=str(request.url),
        data=request.content,
        headers={name: request.headers[name] for name in signed if name != "x-amz-date"},
    )
    SigV4Auth(Credentials("AKIDEXAMPLE", "secret", "t"), "execute-api", "eu-north-1").add_auth(
        again
    )
    assert again.headers["Authorization"] == authorization
    assert json.loads(request.content)["messages"][0]["content"] == "hi"
