"""The model API's default front: HTTPS, SigV4 on every request, responses streamed, reachable
only through the named network path; decided with the API's own resource policy evaluated as
IAM evaluates it (tests/iam_model.py) and with API Gateway's documented limits."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from constructs.serving.signed_model_api import STAGE, STREAM_TIMEOUT
from tests.conftest import Synthesized
from tests.iam_model import Request, is_allowed

ACCOUNT = "123456789012"
API_ID = "a1b2c3d4e5"
VPCE = "vpce-0123456789abcdef0"
# API Gateway developer guide, "Stream the integration response for your proxy integrations":
# STREAM applies to HTTP_PROXY and AWS_PROXY only; a streamed response lasts at most 15 minutes.
STREAMING_INTEGRATIONS = {"HTTP_PROXY", "AWS_PROXY"}
STREAM_MAX_MILLIS = 15 * 60 * 1000


def _one(synthesized: Synthesized, resource_type: str) -> dict[str, Any]:
    (resource,) = synthesized.resources("serving", resource_type).values()
    return resource["Properties"]


def _resolve(value: Any, ids: dict[str, str]) -> Any:
    """The resource policy with its references replaced by example deployed ids."""
    if isinstance(value, dict):
        if "Ref" in value:
            return ids.get(value["Ref"], value["Ref"])
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(str(_resolve(part, ids)) for part in parts)
        return {key: _resolve(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, ids) for item in value]
    return value


def _resource_policy(synthesized: Synthesized) -> dict[str, Any]:
    endpoints = synthesized.resources("serving", "AWS::EC2::VPCEndpoint")
    ids = {"AWS::AccountId": ACCOUNT, **dict.fromkeys(endpoints, VPCE)}
    policy = _resolve(_one(synthesized, "AWS::ApiGateway::RestApi")["Policy"], ids)
    # "execute-api:/*" in an API's resource policy stands for this API's own ARNs.
    text = json.dumps(policy).replace(
        '"execute-api:/*"', f'"arn:aws:execute-api:us-west-2:{ACCOUNT}:{API_ID}/*"'
    )
    return json.loads(text)


def _invoke(principal: str, account: str = ACCOUNT, **context: str) -> Request:
    return Request(
        principal_arn=principal,
        account=account,
        resource_account=ACCOUNT,
        action="execute-api:Invoke",
        resource=f"arn:aws:execute-api:us-west-2:{ACCOUNT}:{API_ID}/{STAGE}/POST/v1/chat/completions",
        context=context,
    )


GRANT = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": "execute-api:Invoke",
            "Resource": f"arn:aws:execute-api:us-west-2:{ACCOUNT}:{API_ID}/{STAGE}/*/*",
        }
    ],
}
CALLER = f"arn:aws:iam::{ACCOUNT}:role/ChatApp"


def test_by_default_callers_sign_every_request_and_responses_stream(
    default_app: Synthesized,
) -> None:
    methods = default_app.resources("serving", "AWS::ApiGateway::Method")
    assert methods, "the default endpoint has no signed API"
    for method in methods.values():
        props = method["Properties"]
        assert props["AuthorizationType"] == "AWS_IAM"  # OPTIONS too: no unsigned preflight
        integration = props["Integration"]
        assert integration["Type"] in STREAMING_INTEGRATIONS
        assert integration["ResponseTransferMode"] == "STREAM"
        assert integration["TimeoutInMillis"] <= STREAM_MAX_MILLIS
        assert integration["TimeoutInMillis"] == STREAM_TIMEOUT.to_milliseconds()
        assert integration["ConnectionType"] == "VPC_LINK"
    (link,) = default_app.resources("serving", "AWS::ApiGateway::VpcLink").values()
    (balancer,) = default_app.resources(
        "serving", "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ).keys()
    assert link["Properties"]["TargetArns"] == [{"Ref": balancer}]


def test_the_drain_fits_inside_a_streamed_response(default_app: Synthesized) -> None:
    drain = default_app.settings.serving.drain_timeout_seconds
    assert drain * 1000 < STREAM_MAX_MILLIS


def test_the_default_api_is_private_to_its_own_vpc_endpoint(default_app: Synthesized) -> None:
    configuration = _one(default_app, "AWS::ApiGateway::RestApi")["EndpointConfiguration"]
    (endpoint_id,) = default_app.resources("serving", "AWS::EC2::VPCEndpoint")
    assert configuration == {"Types": ["PRIVATE"], "VpcEndpointIds": [{"Ref": endpoint_id}]}
    endpoint = _one(default_app, "AWS::EC2::VPCEndpoint")
    # Private DNS would send every execute-api name the VPC resolves to this endpoint.
    assert endpoint["PrivateDnsEnabled"] is False
    assert (
        default_app.templates["serving"]["Outputs"]["EndpointUrl"]["Value"]["Fn::Join"][1][-1]
        == f"/{STAGE}"
    )


@pytest.mark.parametrize(
    ("who", "identity", "context", "allowed"),
    [
        ("a caller granted Invoke, through the endpoint", [GRANT], {"aws:SourceVpce": VPCE}, True),
        ("a caller without a grant", [], {"aws:SourceVpce": VPCE}, False),
        ("a granted caller through another endpoint", [GRANT], {"aws:SourceVpce": "vpce-1"}, False),
        ("a granted caller from outside any endpoint", [GRANT], {}, False),
    ],
)
def test_the_resource_policy_admits_granted_callers_through_the_endpoint_only(
    default_app: Synthesized,
    who: str,
    identity: list[dict[str, Any]],
    context: dict[str, str],
    allowed: bool,
) -> None:
    policy = _resource_policy(default_app)
    assert is_allowed(_invoke(CALLER, **context), identity=identity, resource=policy) is allowed, (
        who
    )


def test_another_account_is_never_admitted(default_app: Synthesized) -> None:
    policy = _resource_policy(default_app)
    stranger = _invoke(
        "arn:aws:iam::999999999999:role/X", "999999999999", **{"aws:SourceVpce": VPCE}
    )
    assert not is_allowed(stranger, identity=[GRANT], resource=policy)


def test_named_client_groups_replace_the_vpc_range(
    synthesize: Callable[[str], Synthesized],
) -> None:
    reserved = synthesize("reserved-capacity")
    named = reserved.settings.serving.endpoint.client_security_group_ids
    groups = reserved.resources("serving", "AWS::EC2::SecurityGroup")
    (group,) = [g for lid, g in groups.items() if "SignedApiEndpointSecurityGroup" in lid]
    ingress = group["Properties"]["SecurityGroupIngress"]
    assert sorted(r["SourceSecurityGroupId"] for r in ingress) == sorted(named)
    assert all("CidrIp" not in r for r in ingress)
    assert {(r["FromPort"], r["ToPort"]) for r in ingress} == {(443, 443)}


def test_the_plain_listener_exists_only_when_chosen(public_app: Synthesized) -> None:
    assert public_app.settings.serving.endpoint.authentication == "none"
    assert not public_app.resources("serving", "AWS::ApiGateway::RestApi")
    assert "ModelApiInvokeArn" not in public_app.templates["serving"]["Outputs"]


def test_an_internet_facing_signed_api_is_regional_and_admits_source_cidrs(
    synthesize: Callable[..., Synthesized],
) -> None:
    """The same variant as test_routine_changes.py's "endpoint scheme" (one synth for both)."""
    internet_facing = synthesize(
        "default",
        {
            "serving.endpoint.scheme": "internet-facing",
            "serving.endpoint.source_cidrs": '["198.51.100.0/24"]',
        },
    )
    template = internet_facing.templates["serving"]
    (api,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    assert api["Properties"]["EndpointConfiguration"] == {"Types": ["REGIONAL"]}
    policy = json.loads(
        json.dumps(_resolve(api["Properties"]["Policy"], {"AWS::AccountId": ACCOUNT})).replace(
            '"execute-api:/*"', f'"arn:aws:execute-api:us-west-2:{ACCOUNT}:{API_ID}/*"'
        )
    )
    inside = _invoke(CALLER, **{"aws:SourceIp": "198.51.100.7"})
    outside = _invoke(CALLER, **{"aws:SourceIp": "203.0.113.9"})
    assert is_allowed(inside, identity=[GRANT], resource=policy)
    assert not is_allowed(outside, identity=[GRANT], resource=policy)
    balancers = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ]
    assert [b["Properties"]["Scheme"] for b in balancers] == ["internal"]


def test_the_iam_model_follows_the_documented_rules() -> None:
    """Hand-made cases from the IAM user guide, so that a wrong model cannot pass the above."""
    resource = f"arn:aws:execute-api:us-west-2:{ACCOUNT}:{API_ID}/*"
    allow_account = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "execute-api:Invoke",
                "Resource": resource,
            }
        ]
    }
    allow_anyone = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": "execute-api:Invoke",
                "Resource": resource,
            }
        ]
    }
    request = _invoke(CALLER)
    assert not is_allowed(request, resource=allow_account)  # delegated: needs an identity grant
    assert is_allowed(request, identity=[GRANT], resource=allow_account)
    assert is_allowed(request, resource=allow_anyone)  # same account: the resource policy suffices
    deny = {"Statement": [{"Effect": "Deny", "Action": "*", "Resource": "*"}]}
    assert not is_allowed(request, identity=[GRANT], resource=allow_anyone, scps=[deny])
    assert not is_allowed(request, identity=[GRANT], boundary={"Statement": []})


def test_the_access_log_names_who_signed_each_request(default_app: Synthesized) -> None:
    """Each line says which IAM principal (its ARN and account) called, through which
    endpoint: the identity SigV4 proved, not only access-key and principal ids."""
    stage = _one(default_app, "AWS::ApiGateway::Stage")
    line = json.loads(stage["AccessLogSetting"]["Format"])
    assert line["userArn"] == "$context.identity.userArn"
    assert line["accountId"] == "$context.identity.accountId"
    assert line["vpceId"] == "$context.identity.vpceId"
    assert {"requestId", "ip", "status", "requestTime"} <= set(line)
