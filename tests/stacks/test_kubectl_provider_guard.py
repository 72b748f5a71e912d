"""The kubectl provider's handler is cluster-admin; the SCP the cluster stack prints keeps it
CloudFormation's alone, decided as IAM evaluates an SCP beside the account's own policies
(tests/iam_model.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from app_config.model import DEFAULT_BOOTSTRAP_QUALIFIER
from tests.conftest import Synthesized
from tests.iam_model import Request, is_allowed

ACCOUNT = "123456789012"
REGION = "us-west-2"
ADMIN = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}  # AdministratorAccess
FULL_AWS_ACCESS = ADMIN  # the organization's default SCP
QUALIFIER = "pdllm"  # a bootstrap of this app's own (cdk bootstrap --qualifier pdllm)
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/Administrator"
CLUSTER_NAME = "pd-llm"


def _bootstrap_role(qualifier: str, kind: str) -> str:
    """A role the CDK bootstrap template creates (RoleName cdk-${Qualifier}-<kind>-...)."""
    return f"arn:aws:iam::{ACCOUNT}:role/cdk-{qualifier}-{kind}-{ACCOUNT}-{REGION}"


SHARED_DEPLOYER = _bootstrap_role(DEFAULT_BOOTSTRAP_QUALIFIER, "cfn-exec-role")
OWN_DEPLOYER = _bootstrap_role(QUALIFIER, "cfn-exec-role")
OWN_DEPLOY_ROLE = _bootstrap_role(QUALIFIER, "deploy-role")


def _example_arn(logical_id: str, resource_type: str) -> str:
    if resource_type == "AWS::Lambda::Function":
        return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}"
    if resource_type == "AWS::EKS::Cluster":
        return f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER_NAME}"
    return f"arn:aws:iam::{ACCOUNT}:role/{logical_id}"


PSEUDO = {"AWS::Partition": "aws", "AWS::AccountId": ACCOUNT, "AWS::Region": REGION}


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
        return re.sub(r"\$\{([^}]+)\}", lambda m: PSEUDO[m.group(1)], value["Fn::Sub"])
    if value.get("Ref") in PSEUDO:
        return PSEUDO[value["Ref"]]
    if "Ref" in value and resources[value["Ref"]]["Type"] == "AWS::EKS::Cluster":
        return CLUSTER_NAME  # a cluster's Ref is its name
    raise AssertionError(f"unexpected intrinsic {value}")


def _deployed(synthesized: Synthesized) -> dict[str, Any]:
    """The printed SCP and the provider's ARNs, as a deployment in ACCOUNT would show them."""
    template = synthesized.templates["cluster"]
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
    (cluster_id,) = synthesized.resources("cluster", "AWS::EKS::Cluster")
    arns["cluster"] = _example_arn(cluster_id, "AWS::EKS::Cluster")
    arns["access_entry"] = f"arn:aws:eks:{REGION}:{ACCOUNT}:access-entry/{CLUSTER_NAME}/role/x"
    return {"scp": json.loads(_resolve(output["Value"], resources)), **arns}


@pytest.fixture(scope="module")
def deployed(default_app: Synthesized) -> dict[str, Any]:
    """With the account's shared default bootstrap (what the default configuration uses)."""
    return _deployed(default_app)


@pytest.fixture(scope="module")
def own_bootstrap(synthesize) -> Synthesized:
    return synthesize("default", {"bootstrap_qualifier": QUALIFIER})


@pytest.fixture(scope="module")
def deployed_own(own_bootstrap: Synthesized) -> dict[str, Any]:
    """With a bootstrap of this app's own."""
    return _deployed(own_bootstrap)


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
    assert _decide(deployed, _call(SHARED_DEPLOYER, "lambda:InvokeFunction", deployed["framework"]))
    assert _decide(
        deployed, _call(deployed["framework_role"], "lambda:InvokeFunction", deployed["handler"])
    )
    assert _decide(
        deployed, _call(SHARED_DEPLOYER, "lambda:UpdateFunctionCode", deployed["handler"])
    )
    assert _decide(deployed, _call(SHARED_DEPLOYER, "iam:PassRole", deployed["handler_role"]))


@pytest.mark.parametrize(
    ("action", "target"),
    [
        ("lambda:InvokeFunction", "handler"),
        ("lambda:InvokeFunction", "framework"),
        ("lambda:InvokeAsync", "handler"),
        ("lambda:InvokeAsync", "framework"),
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
    admin = ADMIN_ROLE
    assert not _decide(deployed, _call(admin, action, deployed[target]))
    # A qualified ARN (a version or alias) is the same function.
    if target in ("handler", "framework"):
        assert not _decide(deployed, _call(admin, action, deployed[target] + ":1"))


def test_the_framework_cannot_be_used_to_reach_anything_else(deployed: dict[str, Any]) -> None:
    """The handler's invoker is the framework role only, and the framework's is CloudFormation's
    role only: neither can be swapped for the other."""
    assert not _decide(
        deployed, _call(SHARED_DEPLOYER, "lambda:InvokeFunction", deployed["handler"])
    )
    assert not _decide(
        deployed, _call(deployed["framework_role"], "lambda:InvokeFunction", deployed["framework"])
    )


# Each row: the principal, the action, the target, allowed. Access entries are the other way to
# cluster-admin: an entry of one's own with AmazonEKSClusterAdminPolicy, or new groups on one.
ACCESS_ENTRY_CASES = [
    ("an administrator creates an access entry", "admin", "eks:CreateAccessEntry", "cluster",
     False),
    ("an administrator associates an access policy", "admin", "eks:AssociateAccessPolicy",
     "access_entry", False),
    ("an administrator changes an entry's groups", "admin", "eks:UpdateAccessEntry",
     "access_entry", False),
    ("CloudFormation creates the configured entries", "deployer", "eks:CreateAccessEntry",
     "cluster", True),
    ("CloudFormation associates their policies", "deployer", "eks:AssociateAccessPolicy",
     "access_entry", True),
    ("an administrator on another cluster", "admin", "eks:CreateAccessEntry", "other_cluster",
     True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("attempt", "who", "action", "target", "allowed"),
    ACCESS_ENTRY_CASES,
    ids=[case[0] for case in ACCESS_ENTRY_CASES],
)
def test_only_cloudformation_grants_access_entries_on_this_cluster(
    deployed: dict[str, Any], attempt: str, who: str, action: str, target: str, allowed: bool
) -> None:
    principal = {"admin": ADMIN_ROLE, "deployer": SHARED_DEPLOYER}[who]
    resource = (
        f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/another"
        if target == "other_cluster"
        else deployed[target]
    )
    assert _decide(deployed, _call(principal, action, resource)) is allowed, attempt


def _manifest_roles(synthesized: Synthesized) -> tuple[str, str]:
    """The execution and deploy roles the CDK CLI uses for the cluster stack (the cloud
    assembly's stack artifact), as a deployment in ACCOUNT shows them."""
    manifest = json.loads((synthesized.outdir / "manifest.json").read_text())
    properties = manifest["artifacts"][synthesized.settings.stack_name("cluster")]["properties"]

    def filled(arn: str) -> str:
        return re.sub(r"\$\{([^}]+)\}", lambda m: PSEUDO[m.group(1)], arn)

    return filled(properties["cloudFormationExecutionRoleArn"]), filled(properties["assumeRoleArn"])


def test_the_guard_exempts_the_role_cloudformation_really_deploys_with(
    deployed: dict[str, Any],
    default_app: Synthesized,
    deployed_own: dict[str, Any],
    own_bootstrap: Synthesized,
) -> None:
    for scp, synthesized in ((deployed, default_app), (deployed_own, own_bootstrap)):
        execution_role, _ = _manifest_roles(synthesized)
        assert _decide(scp, _call(execution_role, "lambda:InvokeFunction", scp["framework"]))
    assert _manifest_roles(default_app)[0] == SHARED_DEPLOYER
    assert _manifest_roles(own_bootstrap) == (OWN_DEPLOYER, OWN_DEPLOY_ROLE)


def test_with_the_shared_bootstrap_any_apps_deployment_is_exempt(deployed: dict[str, Any]) -> None:
    """What docs/security.md states: the default bootstrap's execution role deploys every CDK
    app of the account, so another app's stack may invoke the provider (a custom resource whose
    ServiceToken is the framework's ARN): the reason for bootstrap_qualifier."""
    assert _decide(deployed, _call(SHARED_DEPLOYER, "lambda:InvokeFunction", deployed["framework"]))


def test_with_its_own_bootstrap_only_this_apps_deployment_is_exempt(
    deployed_own: dict[str, Any],
) -> None:
    scp = deployed_own
    assert _decide(scp, _call(OWN_DEPLOYER, "lambda:InvokeFunction", scp["framework"]))
    assert _decide(scp, _call(OWN_DEPLOYER, "eks:CreateAccessEntry", scp["cluster"]))
    # Another app's deployment, with the account's shared bootstrap, no longer gets in.
    for action, target in (
        ("lambda:InvokeFunction", "framework"),
        ("lambda:InvokeAsync", "framework"),
        ("eks:CreateAccessEntry", "cluster"),
        ("iam:PassRole", "handler_role"),
    ):
        assert not _decide(scp, _call(SHARED_DEPLOYER, action, scp[target])), action
    # Only this app's deploy role (the CDK CLI's) hands the execution role to CloudFormation.
    assert _decide(scp, _call(OWN_DEPLOY_ROLE, "iam:PassRole", OWN_DEPLOYER))
    for principal in (ADMIN_ROLE, _bootstrap_role(DEFAULT_BOOTSTRAP_QUALIFIER, "deploy-role")):
        assert not _decide(scp, _call(principal, "iam:PassRole", OWN_DEPLOYER)), principal
