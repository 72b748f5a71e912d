"""The EKS control plane, system nodes and add-ons."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Callable
from typing import get_args

import pytest

from app_config.model import Cluster
from catalog.eks_versions import (
    CORE_ADDONS,
    DEFAULT_MINOR,
    KUBERNETES,
    OBSERVABILITY_ADDONS,
    RELEASES,
    VPC_CNI,
    KubernetesRelease,
)
from constructs.cluster.core_addons import VPC_CNI_CONFIGURATION
from constructs.cluster.node_role import NODE_MANAGED_POLICIES
from nag.serving_checks import CONTROL_PLANE_LOG_TYPES
from serving_manifests.operator_access import OPERATORS_GROUP
from tests.configurations import PROJECT_ROOT
from tests.conftest import Synthesized


def _cluster(synthesized: Synthesized) -> dict:
    (cluster,) = synthesized.resources("cluster", "AWS::EKS::Cluster").values()
    return cluster["Properties"]


def test_every_offered_version_is_a_catalog_release_and_the_default_is_the_newest() -> None:
    offered = get_args(Cluster.model_fields["kubernetes_version"].annotation)
    assert set(offered) == set(RELEASES)
    newest = max(RELEASES, key=lambda minor: tuple(map(int, minor.split("."))))
    assert Cluster().kubernetes_version == DEFAULT_MINOR == KUBERNETES.minor == newest


@pytest.mark.parametrize("release", RELEASES.values(), ids=lambda release: release.minor)
def test_each_release_brings_its_own_minors_kubectl_layer_kube_proxy_and_autoscaler(
    release: KubernetesRelease,
) -> None:
    minor = release.minor.split(".")[1]  # "1.36" -> "36", the layer package's suffix
    package = f"aws-cdk.lambda-layer-kubectl-v{minor}"
    assert release.kubectl_layer.__module__ == f"aws_cdk.lambda_layer_kubectl_v{minor}"
    pins = (PROJECT_ROOT / "requirements.txt").read_text().splitlines()
    assert f"{package}=={importlib.metadata.version(package)}" in pins
    assert release.kube_proxy.version.startswith(f"v{release.minor}.")
    assert release.cluster_autoscaler_image_tag.startswith(f"v{release.minor}.")


@pytest.mark.parametrize("name", ["default", "public-endpoint"])
def test_the_cluster_its_nodes_and_kube_proxy_run_the_configured_version(
    synthesize: Callable[[str], Synthesized], name: str
) -> None:
    synthesized = synthesize(name)
    minor = synthesized.settings.cluster.kubernetes_version
    assert _cluster(synthesized)["Version"] == minor
    groups = [
        group["Properties"]
        for role in ("cluster", "gpu-nodes")
        for group in synthesized.resources(role, "AWS::EKS::Nodegroup").values()
    ]
    assert len(groups) == 3
    assert {group["Version"] for group in groups} == {minor}
    addons = {
        addon["Properties"]["AddonName"]: addon["Properties"]["AddonVersion"]
        for addon in synthesized.resources("cluster", "AWS::EKS::Addon").values()
    }
    assert addons["kube-proxy"] == RELEASES[minor].kube_proxy.version


def test_all_control_plane_logs_are_enabled(default_app: Synthesized) -> None:
    types = {
        entry["Type"]
        for entry in _cluster(default_app)["Logging"]["ClusterLogging"]["EnabledTypes"]
    }
    assert types == CONTROL_PLANE_LOG_TYPES


def test_secrets_are_envelope_encrypted_with_a_rotating_key(default_app: Synthesized) -> None:
    (encryption,) = _cluster(default_app)["EncryptionConfig"]
    assert encryption["Resources"] == ["secrets"]
    key_id = encryption["Provider"]["KeyArn"]["Fn::GetAtt"][0]
    key = default_app.templates["cluster"]["Resources"][key_id]
    assert key["Properties"]["EnableKeyRotation"] is True


def test_endpoint_is_private_by_default(default_app: Synthesized) -> None:
    vpc_config = _cluster(default_app)["ResourcesVpcConfig"]
    assert vpc_config["EndpointPrivateAccess"] is True
    assert vpc_config["EndpointPublicAccess"] is False


def test_public_endpoint_only_admits_the_configured_cidrs(public_app: Synthesized) -> None:
    vpc_config = _cluster(public_app)["ResourcesVpcConfig"]
    expected = [str(cidr) for cidr in public_app.settings.cluster.public_access_cidrs]
    assert vpc_config["EndpointPublicAccess"] is True
    assert vpc_config["PublicAccessCidrs"] == expected


def test_access_entries_not_the_aws_auth_config_map(public_app: Synthesized) -> None:
    assert _cluster(public_app)["AccessConfig"]["AuthenticationMode"] == "API"
    entries = public_app.resources("cluster", "AWS::EKS::AccessEntry").values()
    principals = json.dumps([entry["Properties"]["PrincipalArn"] for entry in entries])
    for arn in public_app.settings.cluster.admin_principal_arns:
        assert arn in principals
    # Nobody else but aws-cdk-lib's kubectl provider: no role any principal could assume.
    others = [
        entry["Properties"]["PrincipalArn"]
        for entry in entries
        if not isinstance(entry["Properties"]["PrincipalArn"], str)
    ]
    roles = public_app.resources("cluster", "AWS::IAM::Role")
    assert all("KubectlProviderHandlerServiceRole" in arn["Fn::GetAtt"][0] for arn in others)
    assert all(arn["Fn::GetAtt"][0] in roles for arn in others)
    roles = public_app.resources("cluster", "AWS::IAM::Role").values()
    for role in roles:
        for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            assert "AWS" not in statement.get("Principal", {}), statement


def test_operators_get_no_eks_access_policy_only_the_kubernetes_group_our_roles_bind(
    public_app: Synthesized,
) -> None:
    settings = public_app.settings
    entries = [
        entry["Properties"]
        for entry in public_app.resources("cluster", "AWS::EKS::AccessEntry").values()
        if entry["Properties"]["PrincipalArn"] in settings.cluster.operator_principal_arns
    ]
    assert len(entries) == len(settings.cluster.operator_principal_arns) >= 1
    for entry in entries:
        assert entry.get("AccessPolicies", []) == []
        assert entry["KubernetesGroups"] == [OPERATORS_GROUP]
        assert entry["Type"] == "STANDARD"


def test_managed_node_groups_not_auto_mode(default_app: Synthesized) -> None:
    assert _cluster(default_app)["ComputeConfig"] == {"Enabled": False}
    assert _cluster(default_app)["BootstrapSelfManagedAddons"] is False


def test_addons_are_pinned_to_the_catalog_versions(default_app: Synthesized) -> None:
    addons = {
        a["Properties"]["AddonName"]: a["Properties"]
        for a in default_app.resources("cluster", "AWS::EKS::Addon").values()
    }
    assert {name: props["AddonVersion"] for name, props in addons.items()} == {
        addon.name: addon.version
        for addon in (*CORE_ADDONS, KUBERNETES.kube_proxy, *OBSERVABILITY_ADDONS)
    }
    assert json.loads(addons[VPC_CNI.name]["ConfigurationValues"]) == VPC_CNI_CONFIGURATION


def test_vpc_cni_version_supports_efa_only_interfaces() -> None:
    major, minor, patch = (int(part) for part in VPC_CNI.version[1:].split("-")[0].split("."))
    assert (major, minor, patch) >= (1, 18, 5)


def test_vpc_cni_role_is_trusted_by_aws_node_only(default_app: Synthesized) -> None:
    roles = default_app.resources("cluster", "AWS::IAM::Role")
    (cni_role_id,) = [lid for lid in roles if lid.startswith("AddonsVpcCniRole")]
    statement, claims = default_app.irsa_trust("cluster", cni_role_id)
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert "system:serviceaccount:kube-system:aws-node" in claims
    assert "sts.amazonaws.com" in claims


def _system(synthesized: Synthesized, resource_type: str) -> dict:
    (resource,) = [
        resource
        for logical_id, resource in synthesized.resources("cluster", resource_type).items()
        if logical_id.startswith("SystemNodes")
    ]
    return resource


def test_system_nodes_require_imdsv2_and_encrypt_their_disk(default_app: Synthesized) -> None:
    template = _system(default_app, "AWS::EC2::LaunchTemplate")
    data = template["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    (device,) = data["BlockDeviceMappings"]
    assert device["Ebs"]["Encrypted"] is True
    assert device["Ebs"]["VolumeType"] == "gp3"
    system = default_app.settings.cluster.system_nodes
    assert device["Ebs"]["VolumeSize"] == system.disk_size_gib


def test_system_node_group_matches_configuration(default_app: Synthesized) -> None:
    props = _system(default_app, "AWS::EKS::Nodegroup")["Properties"]
    system = default_app.settings.cluster.system_nodes
    assert props["AmiType"] == "AL2023_x86_64_STANDARD"
    # In the launch template: a new type rolls the nodes instead of replacing the group.
    assert "InstanceTypes" not in props
    template = _system(default_app, "AWS::EC2::LaunchTemplate")["Properties"]
    assert template["LaunchTemplateData"]["InstanceType"] == system.instance_type
    assert props["ScalingConfig"] == {
        "MinSize": system.scaling.min_size,
        "DesiredSize": system.scaling.desired_size,
        "MaxSize": system.scaling.max_size,
    }
    assert props["NodeRepairConfig"] == {"Enabled": True}
    assert "RemoteAccess" not in props  # no SSH keys: Session Manager instead


def test_node_role_has_only_the_node_policies(default_app: Synthesized) -> None:
    roles = default_app.resources("cluster", "AWS::IAM::Role")
    (node_role,) = [r for lid, r in roles.items() if lid.startswith("NodeRole")]
    attached = json.dumps(node_role["Properties"]["ManagedPolicyArns"])
    assert len(node_role["Properties"]["ManagedPolicyArns"]) == len(NODE_MANAGED_POLICIES)
    for policy in NODE_MANAGED_POLICIES:
        assert f"policy/{policy}" in attached


def test_outputs_tell_how_to_reach_the_cluster(default_app: Synthesized) -> None:
    outputs = default_app.templates["cluster"]["Outputs"]
    command = json.dumps(outputs["UpdateKubeconfigCommand"]["Value"])
    settings = default_app.settings
    assert (
        f"aws eks update-kubeconfig --name {settings.cluster_name} --region {settings.region}"
        in command
    )
    assert "--role-arn" not in command  # access entries for the principals themselves
    assert "ClusterName" in outputs


def test_control_plane_logs_are_ours_before_eks_makes_them(default_app: Synthesized) -> None:
    """EKS creates /aws/eks/<name>/cluster itself, with no retention and no key, unless it
    exists; the cluster waits for ours."""
    settings = default_app.settings
    resources = default_app.templates["cluster"]["Resources"]
    (log_id,) = [
        logical_id
        for logical_id, r in resources.items()
        if r["Type"] == "AWS::Logs::LogGroup"
        and r["Properties"].get("LogGroupName") == f"/aws/eks/{settings.cluster_name}/cluster"
    ]
    group = resources[log_id]
    assert (
        group["Properties"]["RetentionInDays"] == settings.cluster.control_plane_log_retention_days
    )
    assert "KmsKeyId" in group["Properties"]
    assert group["DeletionPolicy"] == "RetainExceptOnCreate"
    (cluster,) = default_app.resources("cluster", "AWS::EKS::Cluster").values()
    assert log_id in cluster["DependsOn"]
    assert cluster["Properties"]["UpgradePolicy"] == {"SupportType": settings.cluster.support_type}
