"""The kubectl provider's handler is cluster-admin; the SCP the cluster stack prints keeps it
CloudFormation's alone, decided as IAM evaluates an SCP beside the account's own policies
(tests/iam_model.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.conftest import Synthesized
from tests.iam_model import Request, is_allowed

ACCOUNT = "123456789012"
REGION = "us-west-2"
ADMIN = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}  # AdministratorAccess
FULL_AWS_ACCESS = ADMIN  # the organization's default SCP
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"


def _example_arn(logical_id: str, resource_type: str) -> str:
    if resource_type == "AWS::Lambda::Function":
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}"
    return f"arn:aws:iam::{ACCOUNT}:role/{logical_id}"


def _resolve(value: Any, resources: dict[str, Any]) -> str:
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_resolve(part, resources) for part in parts)
    if "Fn::GetAtt" in value:
        logical_id, _ = value["Fn::GetAtt"]
        return _example_arn(logical_id, resources[logical_id]["Type"])
    if "Fn::Sub" in value:
        names = {"AWS::Partition": "aws", "AWS::AccountId": ACCOUNT, "AWS::Region": REGION}
        return re.sub(r"\$\{([^}]+)\}", lambda m: names[m.group(1)], value["Fn::Sub"])
    raise AssertionError(f"unexpected intrinsic {value}")


@pytest.fixture(scope="module")
def deployed(default_app: Synthesized) -> dict[str, Any]:
    """The printed SCP and the provider's ARNs, as a deployment in ACCOUNT would show them."""
    template = default_app.templates["cluster"]
    resources = template["Resources"]
    (output,) = [v for k, v in template["Outputs"].items() if "KubectlProviderGuardScp" in k]
    arns = {
        kind: _example_arn(logical_id, resource["Type"])
        for logical_id, resource in resources.items()
        for kind, (needle, resource_type) in {
            "framework": ("KubectlProviderframeworkonEvent", "AWS::Lambda::Function"),
            "framework_role": ("KubectlProviderframeworkonEventServiceRole", "AWS::IAM::Role"),
            "handler": ("KubectlProviderHandler", "AWS::Lambda::Function"),
            "handler_role": ("KubectlProviderHandlerServiceRole", "AWS::IAM::Role"),
        }.items()
        if needle in logical_id and resource["Type"] == resource_type
    }
    return {"scp": json.loads(_resolve(output["Value"], resources)), **arns}


def _call(principal: str, action: str, resource: str) -> Request:
    return Request(principal_arn=principal, account=ACCOUNT, action=action, resource=resource)


def _decide(deployed: dict[str, Any], request: Request, identity: dict = ADMIN) -> bool:
    return is_allowed(request, identity=[identity], scps=[FULL_AWS_ACCESS, deployed["scp"]])


def test_the_handler_role_is_cluster_admin(default_app: Synthesized) -> None:
    """What the README says: the provider's handler holds cluster-admin through an access
    entry; this is why the guard exists."""
    entries = default_app.resources("cluster", "AWS::EKS::AccessEntry").values()
    handler_entries = [
        e["Properties"]
        for e in entries
        if not isinstance(e["Properties"]["PrincipalArn"], str)
        and "KubectlProviderHandlerServiceRole" in e["Properties"]["PrincipalArn"]["Fn::GetAtt"][0]
    ]
    (entry,) = handler_entries
    assert any(
        "AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])
        for policy in entry["AccessPolicies"]
    )


def test_cloudformation_and_the_framework_keep_working(deployed: dict[str, Any]) -> None:
    assert _decide(deployed, _call(DEPLOYER, "lambda:InvokeFunction", deployed["framework"]))
    assert _decide(
        deployed, _call(deployed["framework_role"], "lambda:InvokeFunction", deployed["handler"])
    )
    assert _decide(deployed, _call(DEPLOYER, "lambda:UpdateFunctionCode", deployed["handler"]))
    assert _decide(deployed, _call(DEPLOYER, "iam:PassRole", deployed["handler_role"]))


@pytest.mark.parametrize(
    ("action", "target"),
    [
        ("lambda:InvokeFunction", "handler"),
        ("lambda:InvokeFunction", "framework"),
        ("lambda:UpdateFunctionCode", "handler"),
        ("lambda:UpdateFunctionConfiguration", "framework"),
        ("lambda:AddPermission", "handler"),
        ("iam:PassRole", "handler_role"),
        ("iam:UpdateAssumeRolePolicy", "handler_role"),
        ("iam:PutRolePolicy", "framework_role"),
    ],
)
def test_an_account_administrator_cannot_act_as_the_handler(
    deployed: dict[str, Any], action: str, target: str
) -> None:
    admin = f"arn:aws:iam::{ACCOUNT}:role/Administrator"
    assert not _decide(deployed, _call(admin, action, deployed[target]))
    # A qualified ARN (a version or alias) is the same function.
    if target in ("handler", "framework"):
        assert not _decide(deployed, _call(admin, action, deployed[target] + ":1"))


def test_the_framework_cannot_be_used_to_reach_anything_else(deployed: dict[str, Any]) -> None:
    """The handler's invoker is the framework role only, and the framework's is CloudFormation's
    role only: neither can be swapped for the other."""
    assert not _decide(deployed, _call(DEPLOYER, "lambda:InvokeFunction", deployed["handler"]))
    assert not _decide(
        deployed, _call(deployed["framework_role"], "lambda:InvokeFunction", deployed["framework"])
    )
