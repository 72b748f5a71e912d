"""An existing cluster in the templates: the app references it and creates no control plane or
core add-on of it; what it adds (node groups, its kubectl handler's access entry, the add-ons
the configuration says it installs) names that cluster, and what the owner runs is left out."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from app_config.node_labels import ROLE_LABEL, SYSTEM_ROLE
from catalog.eks_versions import CLUSTER_ADMIN_POLICY, CORE_ADDONS
from catalog.helm_charts import (
    CLUSTER_AUTOSCALER,
    EFA_DEVICE_PLUGIN,
    KUBERAY_OPERATOR,
    NVIDIA_DEVICE_PLUGIN,
)
from tests.config.test_existing_cluster import _provider
from tests.conftest import STACK_ROLES, Synthesized

CONFIGURATION = "existing-cluster"
# aws-cdk-lib's description of its kubectl handler function (aws-eks-v2 kubectl-provider.js).
KUBECTL_HANDLER = "onEvent handler for EKS kubectl resource provider"
# The Helm chart each add-on setting installs (the load balancer controller: aws-cdk-lib's).
CHARTS = {
    "efa_device_plugin": EFA_DEVICE_PLUGIN.chart,
    "nvidia_device_plugin": NVIDIA_DEVICE_PLUGIN.chart,
    "kuberay": KUBERAY_OPERATOR.chart,
    "load_balancer_controller": "aws-load-balancer-controller",
    "cluster_autoscaler": CLUSTER_AUTOSCALER.chart,
}
ALL_INSTALLED = {
    f"cluster.existing.addons.{name}": json.dumps({"source": "installed", "version": version})
    for name, version in {
        "efa_device_plugin": "0.5.20",
        "nvidia_device_plugin": NVIDIA_DEVICE_PLUGIN.version,
        "kuberay": KUBERAY_OPERATOR.version,
        "load_balancer_controller": "v3.2.2",
        "cluster_autoscaler": "v1.35.2",
    }.items()
}


@pytest.fixture(scope="module")
def existing(synthesize: Callable[..., Synthesized]) -> Synthesized:
    return synthesize(CONFIGURATION)


def _charts(synthesized: Synthesized) -> set[str]:
    return {
        r["Properties"]["Chart"] for r in synthesized.in_every_stack("Custom::AWSCDK-EKS-HelmChart")
    }


def test_no_stack_creates_a_control_plane_or_a_core_add_on(existing: Synthesized) -> None:
    assert existing.in_every_stack("AWS::EKS::Cluster") == []
    added = {
        addon["Properties"]["AddonName"] for addon in existing.in_every_stack("AWS::EKS::Addon")
    }
    assert added
    assert not added & ({addon.name for addon in CORE_ADDONS} | {"kube-proxy"})


def test_what_the_app_adds_names_the_existing_cluster(existing: Synthesized) -> None:
    name = existing.settings.cluster_name
    for resource_type in ("AWS::EKS::Nodegroup", "AWS::EKS::Addon", "AWS::EKS::AccessEntry"):
        found = existing.in_every_stack(resource_type)
        assert found
        assert {r["Properties"]["ClusterName"] for r in found} == {name}
    charts = existing.in_every_stack("Custom::AWSCDK-EKS-HelmChart")
    assert {r["Properties"]["ClusterName"] for r in charts} == {name}


def test_the_app_brings_its_own_system_nodes_labelled_as_on_its_own_cluster(
    existing: Synthesized, default_app: Synthesized
) -> None:
    def system_groups(synthesized: Synthesized) -> list[dict]:
        return [
            g["Properties"]
            for g in synthesized.resources("cluster", "AWS::EKS::Nodegroup").values()
            if g["Properties"].get("Labels") == {ROLE_LABEL: SYSTEM_ROLE}
        ]

    (own,) = system_groups(existing)
    (created,) = system_groups(default_app)
    assert own["ScalingConfig"] == created["ScalingConfig"]
    assert own["Subnets"] == [
        s.subnet_id for s in existing.settings.network.existing_vpc.private_subnets
    ]


def test_every_other_stack_deploys_after_the_handlers_access_entry(existing: Synthesized) -> None:
    def after(role: str) -> set[str]:
        direct = existing.dependencies(role)
        return direct.union(*(after(each) for each in direct))

    for role in ("gpu-nodes", "serving", "observability"):
        assert "cluster" in after(role)


def test_the_gpu_nodes_carry_the_existing_clusters_security_group(existing: Synthesized) -> None:
    group = existing.settings.cluster.existing.cluster_security_group_id
    templates = existing.resources("gpu-nodes", "AWS::EC2::LaunchTemplate").values()
    for template in templates:
        interfaces = template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
        assert all(group in interface["Groups"] for interface in interfaces)


def test_the_kubectl_handler_alone_gets_cluster_admin_by_an_access_entry(
    existing: Synthesized,
) -> None:
    template = existing.templates["cluster"]
    (entry,) = [
        e
        for e in existing.resources("cluster", "AWS::EKS::AccessEntry").values()
        if "Fn::GetAtt" in e["Properties"]["PrincipalArn"]
    ]
    (role_id, _) = entry["Properties"]["PrincipalArn"]["Fn::GetAtt"]
    handlers = [
        f
        for f in existing.resources("cluster", "AWS::Lambda::Function").values()
        if f["Properties"].get("Description") == KUBECTL_HANDLER
    ]
    (handler,) = handlers
    assert handler["Properties"]["Role"] == {"Fn::GetAtt": [role_id, "Arn"]}
    (policy,) = entry["Properties"]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert policy["PolicyArn"]["Fn::Join"][1][-1].endswith(f"/{CLUSTER_ADMIN_POLICY}")
    # In the existing VPC's private subnets, in the cluster security group: a private endpoint.
    vpc_config = handler["Properties"]["VpcConfig"]
    existing_vpc = existing.settings.network.existing_vpc
    assert vpc_config["SubnetIds"] == [s.subnet_id for s in existing_vpc.private_subnets]
    assert vpc_config["SecurityGroupIds"] == [
        existing.settings.cluster.existing.cluster_security_group_id
    ]
    # The chart of this stack waits for the entry; the other stacks deploy after this one.
    entry_id = next(k for k, v in template["Resources"].items() if v is entry)
    for chart in existing.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values():
        assert entry_id in chart["DependsOn"]


def test_irsa_roles_trust_the_existing_clusters_oidc_provider(existing: Synthesized) -> None:
    arn = existing.settings.cluster.existing.oidc_provider_arn
    issuer = arn.partition(":oidc-provider/")[2]
    roles = [
        (role, logical_id)
        for role in STACK_ROLES
        for logical_id, resource in existing.resources(role, "AWS::IAM::Role").items()
        if "sts:AssumeRoleWithWebIdentity"
        in json.dumps(resource["Properties"]["AssumeRolePolicyDocument"])
    ]
    assert roles
    for role, logical_id in roles:
        statement, claims = existing.irsa_trust(role, logical_id)
        assert statement["Principal"] == {"Federated": arn}
        assert f"{issuer}:sub" in claims


@pytest.mark.parametrize(
    ("overrides", "installs"),
    [
        (None, {n for n, c in CHARTS.items() if n not in {"kuberay", "load_balancer_controller"}}),
        (ALL_INSTALLED, set()),
        ({key: '{"source": "install"}' for key in ALL_INSTALLED}, set(CHARTS)),
    ],
    ids=["example", "all-installed", "all-install"],
)
def test_the_app_installs_exactly_the_add_ons_set_to_install(
    synthesize: Callable[..., Synthesized], overrides: dict[str, str] | None, installs: set[str]
) -> None:
    synthesized = synthesize(CONFIGURATION, overrides)
    addons = synthesized.settings.cluster.existing.addons
    assert {n for n in CHARTS if addons.installs(n)} == installs
    assert _charts(synthesized) & set(CHARTS.values()) == {CHARTS[n] for n in installs}


def test_with_the_owners_kubectl_provider_the_app_brings_no_handler_and_no_access_entry(
    synthesize: Callable[..., Synthesized],
) -> None:
    synthesized = synthesize(CONFIGURATION, _provider())
    token = synthesized.settings.cluster.existing.kubectl_provider.service_token
    descriptions = {
        f["Properties"].get("Description")
        for f in synthesized.in_every_stack("AWS::Lambda::Function")
    }
    assert KUBECTL_HANDLER not in descriptions
    # Access entries only for the principals configured (literal ARNs), none for a role made here
    principals = [
        e["Properties"]["PrincipalArn"] for e in synthesized.in_every_stack("AWS::EKS::AccessEntry")
    ]
    assert principals == synthesized.settings.cluster.admin_principal_arns
    assert "KubectlProviderGuardScp" not in json.dumps(synthesized.templates["cluster"]["Outputs"])
    applied = [
        *synthesized.in_every_stack("Custom::AWSCDK-EKS-HelmChart"),
        *synthesized.in_every_stack("Custom::AWSCDK-EKS-KubernetesResource"),
    ]
    assert applied
    assert {json.dumps(r["Properties"]["ServiceToken"]) for r in applied} == {json.dumps(token)}


def _controller(synthesized: Synthesized) -> tuple[dict, str]:
    """The load balancer controller's chart properties, and its values as text with every
    token (the cluster's name, the VPC id) replaced by <token>."""
    (chart,) = [
        r["Properties"]
        for r in synthesized.resources("serving", "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Chart"] == CHARTS["load_balancer_controller"]
    ]
    values = chart["Values"]
    parts = values["Fn::Join"][1] if isinstance(values, dict) else [values]
    text = "".join(part if isinstance(part, str) else "<token>" for part in parts)
    return chart, text


def test_the_rebuilt_load_balancer_controller_is_the_one_aws_cdk_lib_renders(
    synthesize: Callable[..., Synthesized], default_app: Synthesized
) -> None:
    install = {key: '{"source": "install"}' for key in ALL_INSTALLED}
    rebuilt, rebuilt_values = _controller(synthesize(CONFIGURATION, install))
    created, created_values = _controller(default_app)
    same = ("Release", "Chart", "Version", "Wait", "Timeout", "Namespace", "Repository")
    assert {k: rebuilt.get(k) for k in same} == {k: created.get(k) for k in same}
    name = synthesize(CONFIGURATION, install).settings.cluster_name
    vpc = synthesize(CONFIGURATION, install).settings.network.existing_vpc.vpc_id
    assert rebuilt_values == created_values.replace("<token>", name, 1).replace("<token>", vpc, 1)


def test_the_rebuilt_controllers_role_may_only_bind_the_endpoints_target_group(
    synthesize: Callable[..., Synthesized],
) -> None:
    synthesized = synthesize(CONFIGURATION, {key: '{"source": "install"}' for key in ALL_INSTALLED})
    policies = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in synthesized.resources("serving", "AWS::IAM::Policy").values()
        if "elasticloadbalancing:RegisterTargets" in json.dumps(p)
    ]
    ((reads, writes),) = policies
    assert reads["Resource"] == "*"
    assert all(action.split(":")[1].startswith("Describe") for action in reads["Action"])
    assert sorted(writes["Action"]) == [
        "elasticloadbalancing:DeregisterTargets",
        "elasticloadbalancing:RegisterTargets",
    ]
    (target_group,) = synthesized.resources("serving", "AWS::ElasticLoadBalancingV2::TargetGroup")
    assert writes["Resource"] == {"Ref": target_group}


# What aws-cdk-lib's kubectl handlers read from each resource (custom-resource-handlers/dist,
# 2.275.0): aws_eks's apply and helm handlers need `RoleArn` (props['RoleArn'], the role they
# pass to `aws eks update-kubeconfig --role-arn`); aws_eks_v2's use their own role and read none.
AWS_EKS_V1_HANDLER_PROPERTY = "RoleArn"
KUBECTL_RESOURCES = ("Custom::AWSCDK-EKS-HelmChart", "Custom::AWSCDK-EKS-KubernetesResource")


def test_an_owners_provider_must_be_aws_eks_v2s(synthesize: Callable[..., Synthesized]) -> None:
    """The app's manifests and charts carry no RoleArn, so an aws_eks (v1) provider's handler
    fails on every one of them (KeyError): cluster.existing.kubectl_provider says v2's."""
    owners = synthesize(CONFIGURATION, _provider())
    sent = [
        resource
        for kind in KUBECTL_RESOURCES
        for resource in owners.in_every_stack(kind)
        if AWS_EKS_V1_HANDLER_PROPERTY in resource["Properties"]
    ]
    assert owners.in_every_stack(KUBECTL_RESOURCES[0])
    assert sent == []


def test_the_owners_cluster_security_group_gets_one_rule_and_members(
    existing: Synthesized,
) -> None:
    """What the app changes on the owner's cluster security group (docs/architecture.md, 'An
    existing cluster'): one ingress rule, the endpoint's load balancer to the Serve port, which
    `cdk destroy` removes; and as members its own nodes, its kubectl handler and the managed
    Prometheus scraper's interfaces."""
    group = existing.settings.cluster.existing.cluster_security_group_id
    naming = {}
    for role in STACK_ROLES:
        for logical_id, resource in existing.templates[role]["Resources"].items():
            if group in json.dumps(resource.get("Properties", {})):
                naming.setdefault(resource["Type"], []).append(logical_id)
    (rule_id,) = naming.pop("AWS::EC2::SecurityGroupIngress")
    (rule,) = [
        r["Properties"]
        for role in STACK_ROLES
        for i, r in existing.templates[role]["Resources"].items()
        if i == rule_id
    ]
    assert (rule["FromPort"], rule["ToPort"], rule["IpProtocol"]) == (8000, 8000, "tcp")
    assert set(naming) <= {"AWS::EC2::LaunchTemplate", "AWS::Lambda::Function", "AWS::APS::Scraper"}
