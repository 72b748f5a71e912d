"""SigV4 signing of the model API's requests (serving.endpoint.authentication iam).

API Gateway with AWS_IAM authorization checks a Signature Version 4 signature for the service
"execute-api" on every request; botocore signs it with the caller's usual credential chain.
pdctl's one HTTP layer (http_call.open_response) signs every request to such a URL."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# https://<api>[-<vpce>].execute-api.<region>.amazonaws.com[.cn]/<stage>
EXECUTE_API_HOST = re.compile(r"^[a-z0-9-]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class MissingCredentialsError(Exception):
    """A signed endpoint and no AWS credentials to sign with."""


def execute_api_region(url: str) -> str | None:
    """The region of an API Gateway URL; None for any other endpoint (signing not needed)."""
    match = EXECUTE_API_HOST.match(urlsplit(url).hostname or "")
    return match.group(1) if match else None


def signed_headers(
    method: str, url: str, body: bytes | None, headers: dict[str, str]
) -> dict[str, str]:
    """``headers`` plus the SigV4 signature over the method, URL, host and the exact body bytes
    sent, for an execute-api URL; unchanged for any other URL."""
    region = execute_api_region(url)
    if region is None:
        return headers
    import boto3
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    credentials = boto3.Session().get_credentials()
    if credentials is None:
        raise MissingCredentialsError(
            "the endpoint takes SigV4-signed requests (authentication iam) and no AWS "
            "credentials were found; sign in (aws sso login, or a role) first"
        )
    unsigned = AWSRequest(
        method=method, url=url, data=body or b"", headers={**headers, "host": urlsplit(url).netloc}
    )
    SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(unsigned)
    return dict(unsigned.headers.items())
