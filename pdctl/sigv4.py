"""SigV4 signing of the model API's requests (serving.endpoint.authentication iam).

API Gateway with AWS_IAM authorization checks a Signature Version 4 signature for the service
"execute-api" on every request; botocore signs it with the caller's usual credential chain."""

from __future__ import annotations

import re
from collections.abc import Generator
from urllib.parse import urlsplit

import httpx2 as httpx  # the HTTP client the openai package is built on

# https://<api>[-<vpce>].execute-api.<region>.amazonaws.com[.cn]/<stage>
EXECUTE_API_HOST = re.compile(r"^[a-z0-9-]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


def execute_api_region(url: str) -> str | None:
    """The region of an API Gateway URL; None for any other endpoint (signing not needed)."""
    match = EXECUTE_API_HOST.match(urlsplit(url).hostname or "")
    return match.group(1) if match else None


class SigV4Auth(httpx.Auth):
    """Signs each request's method, URL, body and host with the caller's AWS credentials."""

    requires_request_body = True

    def __init__(self, region: str) -> None:
        import boto3

        credentials = boto3.Session().get_credentials()
        if credentials is None:
            raise RuntimeError(
                "the endpoint takes SigV4-signed requests (authentication iam) and no AWS "
                "credentials were found; sign in (aws sso login, or a role) first"
            )
        self._credentials = credentials
        self._region = region

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        from botocore.auth import SigV4Auth as BotocoreSigV4
        from botocore.awsrequest import AWSRequest

        headers = {"host": request.url.netloc.decode()}
        if "content-type" in request.headers:
            headers["content-type"] = request.headers["content-type"]
        unsigned = AWSRequest(
            method=request.method, url=str(request.url), data=request.content, headers=headers
        )
        BotocoreSigV4(
            self._credentials.get_frozen_credentials(), "execute-api", self._region
        ).add_auth(unsigned)
        for name, value in unsigned.headers.items():
            request.headers[name] = value
        yield request
