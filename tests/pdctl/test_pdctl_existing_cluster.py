"""pdctl preflight's checks of an existing cluster against botocore's Stubber: EKS's and IAM's
answers for a healthy cluster pass, and each answer that would break the deployment fails its
check alone, naming what to change; what AWS cannot see is undecided, never passed. Request and
response shapes come from botocore's EKS and IAM models."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from botocore.stub import Stubber

from catalog.eks_versions import CLUSTER_ADMIN_POLICY, OBSERVABILITY_ADDONS, RELEASES
from pdctl.checks import Check
from pdctl.existing_cluster import (
    IRSA_AUDIENCE,
    VPC_CNI_FLOOR,
    addon_checks,
    cluster_checks,
    installed_addons,
    kubectl_role_check,
    oidc_provider_check,
    principals_without_entries,
)
from pdctl.preflight import CLIENTS, run_preflight
from tests import aws_stubs
from tests.config.test_existing_cluster import REAL
from tests.config.test_existing_cluster import _provider as owners_provider
from tests.configurations import settings_for

INSTALL_ALL = {
    "cluster.existing.addons.kuberay": '{"source": "install"}',
    "cluster.existing.addons.load_balancer_controller": '{"source": "install"}',
}


def _settings(**overrides: str):
    return settings_for("existing-cluster", **{**REAL, **overrides})


def _cluster(settings) -> dict[str, Any]:
    """DescribeCluster's answer for the cluster the configuration names."""
    existing = settings.cluster.existing
    return {
        "name": settings.cluster_name,
        "status": "ACTIVE",
        "version": settings.cluster.kubernetes_version,
        "endpoint": existing.endpoint,
        "resourcesVpcConfig": {
            "vpcId": settings.network.existing_vpc.vpc_id,
            "clusterSecurityGroupId": existing.cluster_security_group_id,
            "endpointPrivateAccess": True,
            "endpointPublicAccess": False,
        },
        "kubernetesNetworkConfig": {"ipFamily": "ipv4", "serviceIpv4Cidr": "172.20.0.0/16"},
        "identity": {"oidc": {"issuer": "https://" + existing.oidc_provider_arn.partition("/")[2]}},
        "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP"},
    }


def _vpc_cni(version: str = "v1.23.2-eksbuild.1", values: str | None = None) -> dict[str, Any]:
    return {
        "addonName": "vpc-cni",
        "clusterName": "platform-prod",
        "status": "ACTIVE",
        "addonVersion": version,
        "configurationValues": json.dumps({"enableNetworkPolicy": "true"})
        if values is None
        else values,
    }


def _describe(settings, change: Callable[[dict], None] = lambda c: None) -> list:
    answer = copy.deepcopy(_cluster(settings))
    change(answer)
    return [("describe_cluster", {"cluster": answer}, {"name": settings.cluster_name})]


def _addons(settings, names=("vpc-cni", "coredns", "kube-proxy"), cni=None) -> list:
    calls = [("list_addons", {"addons": list(names)}, {"clusterName": settings.cluster_name})]
    if "vpc-cni" in names:
        calls.append(
            (
                "describe_addon",
                {"addon": cni or _vpc_cni()},
                {"clusterName": settings.cluster_name, "addonName": "vpc-cni"},
            )
        )
    return calls


def _provider(settings, audiences=(IRSA_AUDIENCE,)) -> list:
    arn = settings.cluster.existing.oidc_provider_arn
    return [
        (
            "get_open_id_connect_provider",
            {"Url": arn.partition("/")[2], "ClientIDList": list(audiences)},
            {"OpenIDConnectProviderArn": arn},
        )
    ]


def _checked(service: str, check: Callable[..., Any], settings, calls) -> list[Check]:
    client = aws_stubs.client(service)
    with Stubber(client) as stubber:
        for operation, response, params in calls:
            stubber.add_response(operation, response, params)
        outcome = check(client, settings)
        stubber.assert_no_pending_responses()
    return outcome if isinstance(outcome, list) else [outcome]


def _healthy(settings) -> dict[str, tuple[str, Callable[..., Any], list]]:
    return {
        "cluster": ("eks", cluster_checks, _describe(settings)),
        "oidc": ("iam", oidc_provider_check, _provider(settings)),
        "addons": ("eks", addon_checks, _addons(settings)),
    }


def test_a_healthy_existing_cluster_passes_every_check() -> None:
    settings = _settings(**INSTALL_ALL)
    checks = []
    for service, check, calls in _healthy(settings).values():
        checks += _checked(service, check, settings, calls)
    assert [c.name for c in checks if not c.ok] == []
    # the cluster, its endpoint, version, access entries; the provider; the CNI, DNS and proxy,
    # clashes
    assert len(checks) == 8
    assert installed_addons(settings) is None  # nothing the owner runs: nothing unseen


OTHER_MINOR = next(minor for minor in RELEASES if minor != "1.35")


def _set(path: str, value: object) -> Callable[[dict], None]:
    def change(answer: dict) -> None:
        *parents, key = path.split(".")
        for part in parents:
            answer = answer[part]
        answer[key] = value

    return change


# (what is broken, the check it breaks (key of _healthy), the answers, the failing check's name,
#  detail fragment, fix fragment)
BROKEN = [
    ("not active", "cluster", lambda s: _describe(s, _set("status", "UPDATING")),
     "existing cluster platform-prod", "is UPDATING", "describe-cluster"),
    ("another VPC", "cluster",
     lambda s: _describe(s, _set("resourcesVpcConfig.vpcId", "vpc-0f1e2d3c4b5a69788")),
     "existing cluster platform-prod", "is in vpc-0f1e2d3c4b5a69788", "resourcesVpcConfig"),
    ("another security group", "cluster",
     lambda s: _describe(s, _set("resourcesVpcConfig.clusterSecurityGroupId",
                                 "sg-0f1e2d3c4b5a69788")),
     "existing cluster platform-prod", "has cluster security group sg-0f1e2d3c4b5a69788",
     "describe-cluster"),
    ("another issuer", "cluster",
     lambda s: _describe(s, _set("identity.oidc.issuer",
                                 "https://oidc.eks.us-west-2.amazonaws.com/id/" + "E" * 32)),
     "existing cluster platform-prod", "has OIDC issuer", "identity.oidc.issuer"),
    ("another supported minor", "cluster", lambda s: _describe(s, _set("version", OTHER_MINOR)),
     "existing cluster: Kubernetes version", f"the cluster runs {OTHER_MINOR}",
     f"set cluster.kubernetes_version to {OTHER_MINOR}"),
    ("an unsupported minor", "cluster", lambda s: _describe(s, _set("version", "1.33")),
     "existing cluster: Kubernetes version", "the cluster runs 1.33", "upgrade the cluster"),
    ("aws-auth only", "cluster",
     lambda s: _describe(s, _set("accessConfig.authenticationMode", "CONFIG_MAP")),
     "existing cluster: access entries", "authentication mode CONFIG_MAP",
     "authenticationMode=API_AND_CONFIG_MAP"),
    ("an audience without STS", "oidc", lambda s: _provider(s, ["other"]),
     "existing cluster: IAM OIDC provider", "without sts.amazonaws.com", "add-client-id"),
    ("an old VPC CNI", "addons", lambda s: _addons(s, cni=_vpc_cni("v1.18.4-eksbuild.1")),
     "existing cluster: VPC CNI", "older than 1.18.5", "update-addon"),
    ("no network policy enforcement", "addons", lambda s: _addons(s, cni=_vpc_cni(values="")),
     "existing cluster: VPC CNI", "enableNetworkPolicy is not 'true'", "enableNetworkPolicy"),
    ("network policy off", "addons",
     lambda s: _addons(s, cni=_vpc_cni(values="enableNetworkPolicy: 'false'")),
     "existing cluster: VPC CNI", "would be accepted and not enforced", "update-addon"),
    ("an add-on the app creates", "addons",
     lambda s: _addons(s, names=("vpc-cni", "coredns", "kube-proxy", OBSERVABILITY_ADDONS[0].name)),
     "existing cluster: add-ons", f"{OBSERVABILITY_ADDONS[0].name} already installed",
     "`cdk destroy` deletes them"),
    ("an IPv6 cluster", "cluster",
     lambda s: _describe(s, _set("kubernetesNetworkConfig.ipFamily", "ipv6")),
     "existing cluster platform-prod", "assigns ipv6 addresses to pods", "IPv6 cluster"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("broken", "key", "answers", "check_name", "detail", "fix"),
    BROKEN,
    ids=[row[0] for row in BROKEN],
)
def test_each_broken_answer_fails_its_check_alone_naming_what_to_change(
    broken: str,
    key: str,
    answers: Callable[[Any], list],
    check_name: str,
    detail: str,
    fix: str,
) -> None:
    settings = _settings(**INSTALL_ALL)
    service, check, _ = _healthy(settings)[key]
    checks = _checked(service, check, settings, answers(settings))
    failing = [c for c in checks if not c.ok]
    assert [c.name for c in failing] == [check_name]
    (found,) = failing
    assert not found.inconclusive
    assert detail in found.detail
    assert fix in found.fix


def test_an_api_reachable_only_through_nat_is_undecided_not_passed() -> None:
    """Whether the NAT gateways' addresses are in publicAccessCidrs is not AWS's to say here."""
    settings = _settings(**INSTALL_ALL)

    def public_only(answer: dict) -> None:
        answer["resourcesVpcConfig"].update(
            endpointPrivateAccess=False, publicAccessCidrs=["203.0.113.0/24"]
        )

    checks = _checked("eks", cluster_checks, settings, _describe(settings, public_only))
    (endpoint,) = [c for c in checks if not c.ok]
    assert endpoint.name == "existing cluster: API endpoint from the VPC"
    assert endpoint.inconclusive
    assert "203.0.113.0/24" in endpoint.detail
    assert "endpointPrivateAccess=true" in endpoint.fix


def test_the_vpc_cni_floor_is_the_efa_only_interfaces_one() -> None:
    settings = _settings(**INSTALL_ALL)
    floor = "v" + ".".join(str(part) for part in VPC_CNI_FLOOR) + "-eksbuild.1"
    (cni, *_) = _checked("eks", addon_checks, settings, _addons(settings, cni=_vpc_cni(floor)))
    assert cni.ok


def test_a_cluster_that_does_not_exist_fails_naming_the_setting() -> None:
    settings = _settings(**INSTALL_ALL)
    client = aws_stubs.client("eks")
    with Stubber(client) as stubber:
        stubber.add_client_error(
            "describe_cluster", "ResourceNotFoundException", "No cluster found for name",
            expected_params={"name": settings.cluster_name},
        )  # fmt: skip
        (check,) = cluster_checks(client, settings)
    assert not check.ok
    assert not check.inconclusive
    assert "cluster.name" in check.fix


def test_a_provider_iam_does_not_know_fails_with_how_to_register_it() -> None:
    settings = _settings(**INSTALL_ALL)
    client = aws_stubs.client("iam")
    with Stubber(client) as stubber:
        stubber.add_client_error("get_open_id_connect_provider", "NoSuchEntity", "not found")
        check = oidc_provider_check(client, settings)
    assert not check.ok
    assert "associate-iam-oidc-provider" in check.fix


@pytest.mark.parametrize(
    ("names", "undecided_name"),
    [
        (("coredns", "kube-proxy"), "existing cluster: VPC CNI"),
        (("vpc-cni",), "existing cluster: CoreDNS and kube-proxy"),
    ],
)
def test_a_self_managed_core_add_on_is_undecided_not_passed(
    names: tuple[str, ...], undecided_name: str
) -> None:
    settings = _settings(**INSTALL_ALL)
    checks = _checked("eks", addon_checks, settings, _addons(settings, names=names))
    (unseen,) = [c for c in checks if not c.ok]
    assert (unseen.name, unseen.inconclusive) == (undecided_name, True)
    assert "kubectl" in unseen.fix


def test_the_add_ons_the_owner_runs_are_said_not_checked_with_where_to_look() -> None:
    settings = _settings()  # the example: KubeRay and the load balancer controller installed
    check = installed_addons(settings)
    assert check is not None
    assert check.detail.startswith("not checked: ")
    for name, choice in settings.cluster.existing.addons.installed().items():
        assert f"{name} {choice.version}" in check.detail
    assert "helm list -A" in check.detail


# The planned names (a check that cannot read its answer is reported under its planned name).
EXISTING_CLUSTER_CHECKS = {
    "existing cluster",
    "existing cluster: IAM OIDC provider",
    "existing cluster: admins' and operators' access entries",
    "existing cluster: add-ons",
    "existing cluster: add-ons it runs",
}


def test_preflight_runs_the_existing_cluster_checks_only_for_an_existing_cluster() -> None:
    clients = {name: aws_stubs.Unanswered() for name in CLIENTS}
    checks = run_preflight(clients, _settings())
    names = {check.name for check in checks}
    assert names >= EXISTING_CLUSTER_CHECKS
    asked = [c for c in checks if c.name.startswith("existing cluster")]
    # No check that asks AWS passes on no answer; the one that asks nothing says so.
    assert [c.name for c in asked if c.ok] == ["existing cluster: add-ons it runs"]
    default = run_preflight(clients, settings_for("existing-vpc"))
    assert not any(check.name.startswith("existing cluster") for check in default)


def _entries(settings, taken: tuple[str, ...] = ()) -> Callable[[Stubber], None]:
    """DescribeAccessEntry for each configured principal: found for ``taken``, else not."""

    def answer(stubber: Stubber) -> None:
        cluster = settings.cluster
        for arn in [*cluster.admin_principal_arns, *cluster.operator_principal_arns]:
            params = {"clusterName": settings.cluster_name, "principalArn": arn}
            if arn in taken:
                entry = {"clusterName": settings.cluster_name, "principalArn": arn}
                stubber.add_response("describe_access_entry", {"accessEntry": entry}, params)
            else:
                stubber.add_client_error(
                    "describe_access_entry", "ResourceNotFoundException", "not found",
                    expected_params=params,
                )  # fmt: skip

    return answer


OPERATOR = "arn:aws:iam::409387615243:role/llm-on-call"


@pytest.mark.parametrize("taken", [(), (OPERATOR,)], ids=["free", "operator-taken"])
def test_principals_the_app_grants_must_hold_no_entry_yet(taken: tuple[str, ...]) -> None:
    settings = _settings(**{"cluster.operator_principal_arns": json.dumps([OPERATOR])})
    client = aws_stubs.client("eks")
    with Stubber(client) as stubber:
        _entries(settings, taken)(stubber)
        check = principals_without_entries(client, settings)
        stubber.assert_no_pending_responses()
    assert check is not None
    assert check.ok is not bool(taken)
    if taken:
        assert OPERATOR in check.detail
        assert "operator_principal_arns" in check.fix


def _policies(*policies: tuple[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "policyArn": f"arn:aws:eks::aws:cluster-access-policy/{policy}",
            "accessScope": {"type": scope},
        }
        for policy, scope in policies
    ]


@pytest.mark.parametrize(
    ("policies", "ok"),
    [
        (_policies((CLUSTER_ADMIN_POLICY, "cluster")), True),
        (_policies((CLUSTER_ADMIN_POLICY, "namespace")), False),
        (_policies(("AmazonEKSEditPolicy", "cluster")), False),
        ([], False),
    ],
    ids=["cluster-admin", "admin-in-a-namespace", "edit", "none"],
)
def test_the_owners_kubectl_provider_needs_cluster_admin(
    policies: list[dict[str, Any]], ok: bool
) -> None:
    settings = _settings(**owners_provider())
    role = settings.cluster.existing.kubectl_provider.role_arn
    client = aws_stubs.client("eks")
    with Stubber(client) as stubber:
        stubber.add_response(
            "list_associated_access_policies",
            {"associatedAccessPolicies": policies},
            {"clusterName": settings.cluster_name, "principalArn": role},
        )
        check = kubectl_role_check(client, settings)
    assert check is not None
    assert check.ok is ok
    if not ok:
        assert "associate-access-policy" in check.fix
    assert kubectl_role_check(client, _settings()) is None  # the app's own handler
