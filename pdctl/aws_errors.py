"""AWS refusals as pdctl tells them, by class: what the answer means for a check, and what to do.

A ClientError is not one thing. "Not found" is an answer (the reservation, role or image is not
there: the check fails, exit 1); a refusal of the caller, throttling or a server error is no
answer at all (the check could not run: exit 2, pdctl.output's codes), and each needs its own
next step: credentials advice fits only the credential errors. Codes from the AWS APIs' common
errors (EC2 API reference, "Common client errors"; botocore's service models for the
JSON-protocol services' AccessDeniedException and ThrottlingException; STS's
ExpiredToken/InvalidClientTokenId).
"""

from __future__ import annotations

from typing import Any

CREDENTIALS_HINT = (
    "configure AWS credentials (AWS_PROFILE, `aws sso login`, or `aws configure`) for the "
    "target account"
)
CREDENTIAL_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "AuthFailure",
        "SignatureDoesNotMatch",
        "InvalidSignatureException",
        "IncompleteSignature",
        "MissingAuthenticationToken",
    }
)
DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden"}
)
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
    }
)


def code(error: Any) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def message(error: Any) -> str:
    return str(
        getattr(error, "response", {}).get("Error", {}).get("Message") or code(error) or error
    )


def _status(error: Any) -> int:
    status = getattr(error, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else 0


def kind(error: Any) -> str:
    """credentials, denied, throttled, server, missing-stack or answer (AWS answered about the
    thing asked for: not found, invalid, ...)."""
    found = code(error)
    if found in CREDENTIAL_CODES:
        return "credentials"
    if found in DENIED_CODES or found.endswith("AccessDenied") or _status(error) in (401, 403):
        return "denied"
    if found in THROTTLING_CODES:
        return "throttled"
    if _status(error) >= 500 or found in ("InternalError", "InternalFailure", "ServiceUnavailable"):
        return "server"
    if (
        found == "ValidationError"
        and "does not exist" in message(error)
        and "Stack" in message(error)
    ):
        return "missing-stack"
    return "answer"


def cannot_decide(error: Any) -> bool:
    """A refusal, throttling or a server error: nothing was learnt about what the check asks."""
    return kind(error) in ("credentials", "denied", "throttled", "server")


def hint(error: Any, answer_hint: str = "") -> str:
    """What to do next, for the error's class (`answer_hint` for an answer about the thing)."""
    operation = getattr(error, "operation_name", "") or "this call"
    return {
        "credentials": CREDENTIALS_HINT,
        "denied": f"this identity may not call {operation}: allow that action in its IAM policy "
        "(or use an identity that has it)",
        "throttled": f"AWS throttled {operation}: run the command again in a minute",
        "server": f"AWS failed {operation} on its side: run the command again",
        "missing-stack": "the stack is not deployed in this account and region: check the "
        "configuration's settings.prefix and region (--config, -c) and the credentials' account, "
        "or deploy it first (make deploy)",
    }.get(kind(error), answer_hint or f"AWS refused {operation}: {code(error) or 'no code'}")
