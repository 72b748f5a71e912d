"""pdctl's one error layer against answers that misbehave, by class: every refusal or odd answer
described as what it is, with the fix for its class and the exit code docs/pdctl.md gives
(1: the system answered wrongly; 2: the check could not run or decide).

- a Kubernetes API that refuses the caller: one line with what the API server said (its Status
  message), never the client's raw exception (headers, body), for every command on the cluster;
- API Gateway's refusals: the reason it names in x-amzn-ErrorType, and the hint that reason
  needs (a path or stage the API does not have; IAM; the VPC endpoint);
- AWS errors by kind: a stack that does not exist is not a credentials problem, a denial names
  the call, only credential errors get credentials advice;
- a body in a content coding pdctl did not ask for is named, not judged as "not JSON";
- a refusal, throttling or a server error leaves a preflight check undecided (exit 2), where
  "not found" fails it (exit 1); `pdctl image`'s "cannot tell" exits 2.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from app_config import load_settings
from pdctl.checks import exit_code
from pdctl.cli import app
from pdctl.preflight import CLIENTS, admin_principals, efa_matches_catalog
from tests.configurations import context_for, settings_for
from tests.pdctl.hostile_server import Connection, Request, hostile_server, kubeconfig_for
from tests.pdctl.test_pdctl_hostile import HEALTHY_METRICS, models_ok, stream_ok

SETTINGS = settings_for("default")
NAMESPACE = SETTINGS.serving.namespace
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": None,
    "AWS_PROFILE": None,
    "AWS_DEFAULT_PROFILE": None,
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_MAX_ATTEMPTS": "1",
}


def _invoke(args: list[str], env: dict[str, str | None]) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "400", **env})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    text = " ".join(result.output.split())
    assert "Traceback" not in text
    return result.exit_code, text


# What the API server says when RBAC refuses: a Status object (Kubernetes API conventions).
def _forbidden(resource: str, verb: str):
    said = (
        f'{resource} is forbidden: User "me" cannot {verb} resource "{resource}" in API group '
        f'"" in the namespace "{NAMESPACE}"'
    )

    def route(conn: Connection, request: Request) -> None:
        conn.respond_json(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": said,
                "reason": "Forbidden",
                "code": 403,
            },
            "403 Forbidden",
        )

    return route, said


def _echo(conn: Connection, request: Request) -> None:
    """Creates answer with what was sent; deletes with a Status."""
    if request.method == "POST":
        conn.respond_json(json.loads(request.body), "201 Created")
    else:
        conn.respond_json({"kind": "Status", "apiVersion": "v1", "status": "Success"})


PODS_FORBIDDEN, PODS_SAID = _forbidden("pods", "list")
JOBS_FORBIDDEN, JOBS_SAID = _forbidden("jobs", "create")
CORE = f"/api/v1/namespaces/{NAMESPACE}"
BATCH = f"/apis/batch/v1/namespaces/{NAMESPACE}"

CLUSTER_REFUSALS = {
    # command: (arguments, routes, what the API server said)
    "efa-check, pod list refused": (
        ["efa-check"],
        {f"{CORE}/services": _echo, f"{BATCH}/jobs": _echo, f"{CORE}/pods": PODS_FORBIDDEN},
        PODS_SAID,
    ),
    "image --from-cluster, pod list refused": (
        ["image", "--from-cluster", "--no-registry"],
        {f"{CORE}/pods": PODS_FORBIDDEN},
        PODS_SAID,
    ),
    "bench, job creation refused": (["bench"], {f"{BATCH}/jobs": JOBS_FORBIDDEN}, JOBS_SAID),
}


@pytest.mark.parametrize("scenario", list(CLUSTER_REFUSALS))
def test_a_kubernetes_refusal_is_one_line_with_what_the_api_server_said(
    scenario: str, tmp_path: Path
) -> None:
    args, routes, said = CLUSTER_REFUSALS[scenario]
    with hostile_server(routes) as url:
        code, text = _invoke(args, {"KUBECONFIG": kubeconfig_for(tmp_path, url)})
    assert code == 2, text
    assert f"the Kubernetes API refused the caller (HTTP 403: {said})" in text
    assert "access entry" in text
    for raw in ("HTTP response headers", "HTTP response body", "Reason: Forbidden"):
        assert raw not in text  # the client's exception as it prints itself


def test_decode_metrics_refused_by_the_kubernetes_api_cannot_tell_with_its_message(
    tmp_path: Path,
) -> None:
    routes = {"/v1/models": models_ok, "/v1/chat": stream_ok, f"{CORE}/pods": PODS_FORBIDDEN}
    with hostile_server(routes) as url:
        code, text = _invoke(
            ["verify", "--url", url, "--timeout", "1", "--metrics-wait", "0"],
            {"KUBECONFIG": kubeconfig_for(tmp_path, url)},
        )
    assert code == 2, text
    assert f"HTTP 403: {PODS_SAID}" in text


def _api_gateway(status: str, error_type: str, body: dict):
    def route(conn: Connection, request: Request) -> None:
        conn.respond(
            json.dumps(body), status=status, extra_headers=f"x-amzn-ErrorType: {error_type}\r\n"
        )

    return route


API_GATEWAY = [
    # (status, x-amzn-ErrorType, body, exit code, fragments)
    (
        "403 Forbidden",
        "MissingAuthenticationTokenException",
        {"message": "Missing Authentication Token"},
        2,
        [
            "MissingAuthenticationTokenException: Missing Authentication Token",
            "must end with the stage",
        ],
    ),
    (
        "403 Forbidden",
        "AccessDeniedException",
        {"Message": "User: arn:aws:sts::240318571604:assumed-role/dev/x is not authorized"},
        2,
        ["AccessDeniedException: User: arn:aws:sts", "execute-api:Invoke", "ModelApiInvokeArn"],
    ),
    (
        "403 Forbidden",
        "ForbiddenException:http://internal.amazon.com/coral/com.amazon.coral.service/",
        {"message": "Forbidden"},
        2,
        ["HTTP 403 ForbiddenException: Forbidden", "VPC endpoint"],
    ),
    (
        "403 Forbidden",
        "InvalidSignatureException",
        {"message": "The request signature we calculated does not match"},
        2,
        ["InvalidSignatureException", "clock"],
    ),
    (
        "429 Too Many Requests",
        "TooManyRequestsException",
        {"message": "Too Many Requests"},
        2,
        ["HTTP 429 TooManyRequestsException", "run pdctl verify again in a minute"],
    ),
    (
        "502 Bad Gateway",
        "InternalServerErrorException",
        {"message": "Internal server error"},
        1,
        ["API Gateway refused it: HTTP 502 InternalServerErrorException: Internal server error"],
    ),
]


@pytest.mark.parametrize(
    ("status", "error_type", "body", "code", "fragments"),
    API_GATEWAY,
    ids=[r[1][:30] for r in API_GATEWAY],
)
def test_an_api_gateway_refusal_keeps_the_reason_it_names(
    status, error_type, body, code, fragments
) -> None:
    with hostile_server({"/v1/models": _api_gateway(status, error_type, body)}) as url:
        exit_status, text = _invoke(["verify", "--url", url, "--timeout", "1"], {})
    assert exit_status == code, text
    for fragment in fragments:
        assert fragment in text


def _gzipped(content_type: str, body: str):
    data = gzip.compress(body.encode())

    def route(conn: Connection, request: Request) -> None:
        conn.respond(data, content_type, extra_headers="Content-Encoding: gzip\r\n")

    return route


@pytest.mark.parametrize(
    ("path", "code"),
    [("/v1/models", 1), ("/metrics", 2)],
    ids=["models", "metrics"],
)
def test_a_content_coding_pdctl_did_not_ask_for_is_named(path: str, code: int) -> None:
    behaviour = (
        _gzipped("application/json", json.dumps({"data": [{"id": SETTINGS.serving.model.id}]}))
        if path == "/v1/models"
        else _gzipped("text/plain", "up 1\n")
    )
    routes = {
        "/v1/models": models_ok,
        "/v1/chat": stream_ok,
        "/metrics": HEALTHY_METRICS,
        path: behaviour,
    }
    with hostile_server(routes) as url:
        exit_status, text = _invoke(
            [
                "verify",
                "--url",
                url,
                "--metrics-url",
                f"{url}/metrics",
                "--timeout",
                "1",
                "--metrics-wait",
                "0",
            ],
            {},
        )
    assert exit_status == code, text
    assert "the answer is encoded gzip (Content-Encoding), which pdctl did not ask for" in text
    assert "not JSON" not in text


def _cloudformation_error(status: str, error_code: str, message: str):
    """CloudFormation's query-protocol error document."""
    body = (
        '<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error>'
        f"<Type>Sender</Type><Code>{error_code}</Code><Message>{message}</Message></Error>"
        "<RequestId>example</RequestId></ErrorResponse>"
    )

    def route(conn: Connection, request: Request) -> None:
        conn.respond(body, "text/xml", status)

    return route


STACK = SETTINGS.stack_name("serving")
AWS_REFUSALS = [
    # (status, code, message, fragments that must be there, fragment that must not)
    (
        "400 Bad Request",
        "ValidationError",
        f"Stack with id {STACK} does not exist",
        [f"stack {STACK} does not exist in {SETTINGS.region}", "pass --url", "settings.prefix"],
        "configure AWS credentials",
    ),
    (
        "403 Forbidden",
        "AccessDenied",
        "User is not authorized to perform: cloudformation:DescribeStacks",
        ["AccessDenied", "may not call DescribeStacks"],
        "configure AWS credentials",
    ),
    (
        "403 Forbidden",
        "ExpiredToken",
        "The security token included in the request is expired",
        ["ExpiredToken", "configure AWS credentials"],
        "may not call",
    ),
]


@pytest.mark.parametrize(
    ("status", "error_code", "message", "present", "absent"),
    AWS_REFUSALS,
    ids=[r[1] for r in AWS_REFUSALS],
)
def test_aws_errors_get_the_advice_of_their_kind(
    status, error_code, message, present, absent
) -> None:
    with hostile_server({"/": _cloudformation_error(status, error_code, message)}) as url:
        code, text = _invoke(["verify"], {**AWS_ENV, "AWS_ENDPOINT_URL_CLOUDFORMATION": url})
    assert code == 2, text
    for fragment in present:
        assert fragment in text
    assert absent not in text


def _ec2():
    return boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-west-2"
    ).client("ec2")


@pytest.mark.parametrize(
    ("error_code", "http_status", "inconclusive"),
    [
        ("UnauthorizedOperation", 403, True),
        ("RequestLimitExceeded", 503, True),
        ("InternalError", 500, True),
        ("AuthFailure", 401, True),
        ("InvalidInstanceType", 400, False),  # an answer: EC2 has no such type
    ],
)
def test_a_refusal_leaves_a_preflight_check_undecided_and_an_answer_fails_it(
    error_code: str, http_status: int, inconclusive: bool
) -> None:
    client = _ec2()
    with Stubber(client) as stubber:
        stubber.add_client_error(
            "describe_instance_types", service_error_code=error_code, http_status_code=http_status
        )
        check = efa_matches_catalog(client, "prefill", SETTINGS.gpu_nodes.prefill)
    assert not check.ok
    assert check.inconclusive is inconclusive
    assert exit_code([check]) == (2 if inconclusive else 1)


def test_an_admin_principal_iam_will_not_show_is_undecided_not_missing() -> None:
    iam = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing").client("iam")
    settings = load_settings(
        context_for(
            "default", **{"cluster.admin_principal_arns": '["arn:aws:iam::240318571604:role/Ops"]'}
        )
    )
    with Stubber(iam) as stubber:
        stubber.add_client_error(
            "get_role", service_error_code="AccessDenied", http_status_code=403
        )
        (check,) = admin_principals(iam, settings)
    assert check.inconclusive
    assert "does not exist" not in check.detail


def test_image_cannot_tell_exits_2_as_every_undecided_check_does() -> None:
    """The registry refused (ECR's JSON-protocol error): the verdict is "cannot tell"."""

    def refused(conn: Connection, request: Request) -> None:
        body = {"__type": "AccessDeniedException", "message": "not allowed"}
        conn.respond(json.dumps(body), "application/x-amz-json-1.1", "400 Bad Request")

    with hostile_server({"/": refused}) as url:
        code, text = _invoke(["image", "--json"], {**AWS_ENV, "AWS_ENDPOINT_URL_ECR": url})
    assert code == 2, text
    assert "cannot tell" in text
    assert '"inconclusive": true' in text


def test_preflight_clients_are_the_ones_tested_here() -> None:
    assert "ec2" in CLIENTS
    assert "iam" in CLIENTS


def test_a_cleanup_the_api_refused_is_reported_in_the_api_servers_words() -> None:
    """efa-check's deletions: what is left to its TTL, and why, without the client's dump."""
    from kubernetes.client.exceptions import ApiException

    from pdctl import efa_run

    said = 'jobs.batch "x" is forbidden: User "me" cannot delete resource "jobs"'

    class Refusing:
        def delete(self, kind: str, namespace: str, name: str) -> None:
            error = ApiException(status=403, reason="Forbidden")
            error.body = json.dumps({"kind": "Status", "message": said, "code": 403})
            error.headers = {"Audit-Id": "secret-looking"}
            raise error

    (reported,) = efa_run._delete_all(Refusing(), NAMESPACE, [("Job", "x")])
    assert reported.startswith(f"Job x: the Kubernetes API refused the caller (HTTP 403: {said})")
    assert "Audit-Id" not in reported
