"""`pdctl preflight` for an existing cluster (cluster.existing): what synth takes on trust.

Synth imports the cluster from the name, endpoint, security group and OIDC provider in the
configuration and checks only their shape (app_config/rules/existing_cluster.py); these checks
ask EKS and IAM whether they are true, and whether the cluster can run what the app adds.
Read-only: eks:DescribeCluster, eks:ListAddons, eks:DescribeAddon,
eks:DescribeAccessEntry, eks:ListAssociatedAccessPolicies, iam:GetOpenIDConnectProvider.

What these checks cannot see: Helm releases and anything else inside Kubernetes are not in any
AWS API. The add-ons set to installed (their versions, values, namespaces) are one line saying
so, with the commands that show them; a self-managed core add-on is undecided, since the VPC
CNI's network policy enforcement is something the app cannot do without.

Sources: EKS API reference, DescribeCluster (status, version, resourcesVpcConfig with
endpointPrivateAccess and publicAccessCidrs, kubernetesNetworkConfig.ipFamily, identity.oidc,
accessConfig.authenticationMode), ListAddons / DescribeAddon (addonVersion, status,
configurationValues); EKS user guide, "Grant IAM users access to Kubernetes with EKS access
entries" (access entries need authentication mode API or API_AND_CONFIG_MAP), "Restrict pod
network traffic with Kubernetes network policies" (the VPC CNI enforces NetworkPolicy only with
enableNetworkPolicy "true", VPC CNI 1.14 or later) and "Manage EFA devices on Amazon EKS"
(EFA-only interfaces need VPC CNI 1.18.5 or later); IAM API reference, GetOpenIDConnectProvider
(ClientIDList; IRSA tokens carry the audience sts.amazonaws.com).
"""

from __future__ import annotations

from typing import Any

import yaml
from botocore.exceptions import ClientError

from app_config import Settings
from app_config.model import ExistingCluster
from catalog.eks_versions import CLUSTER_ADMIN_POLICY, OBSERVABILITY_ADDONS, RELEASES
from pdctl.checks import Check, failed, passed, undecided

ACCESS_ENTRY_MODES = ("API", "API_AND_CONFIG_MAP")
IRSA_AUDIENCE = "sts.amazonaws.com"
# EKS user guide: EFA-only interfaces need 1.18.5 (catalog/eks_versions.py VPC_CNI's comment);
# network policy enforcement came with 1.14, so this one floor covers both.
VPC_CNI_FLOOR = (1, 18, 5)
CORE_ADDON_NAMES = ("vpc-cni", "coredns", "kube-proxy")
# What shows each add-on the app cannot see through AWS (cluster.existing.addons).
IN_CLUSTER = "`helm list -A` (APP VERSION), `kubectl get ds,deploy -A -o wide` (images)"


def _existing(settings: Settings) -> ExistingCluster:
    existing = settings.cluster.existing
    assert existing is not None  # run_preflight asks only with one
    return existing


def _version(text: str) -> tuple[int, ...]:
    """v1.23.2-eksbuild.1 -> (1, 23, 2)."""
    return tuple(int(part) for part in text.lstrip("v").partition("-")[0].split("."))


def cluster_checks(eks: Any, settings: Settings) -> list[Check]:
    """The cluster exists and is ACTIVE, in network.existing_vpc, with the security group,
    endpoint and OIDC issuer given, and gives pods IPv4 addresses; its API is reachable from the
    VPC; it runs cluster.kubernetes_version (one the app supports); and it takes access entries
    (the app's kubectl handler gets one)."""
    existing = _existing(settings)
    name = f"existing cluster {settings.cluster_name}"
    try:
        cluster = eks.describe_cluster(name=settings.cluster_name)["cluster"]
    except ClientError as error:
        return [_refused(name, error, "set cluster.name to a cluster of this account and region")]
    vpc = settings.network.existing_vpc
    problems = []
    if cluster["status"] != "ACTIVE":
        problems.append(f"is {cluster['status']}, not ACTIVE")
    config = cluster["resourcesVpcConfig"]
    if vpc is not None and config.get("vpcId") != vpc.vpc_id:
        problems.append(f"is in {config.get('vpcId')}, not network.existing_vpc {vpc.vpc_id}")
    if config.get("clusterSecurityGroupId") != existing.cluster_security_group_id:
        problems.append(
            f"has cluster security group {config.get('clusterSecurityGroupId')}, not "
            f"{existing.cluster_security_group_id}"
        )
    if cluster.get("endpoint") != existing.endpoint:
        problems.append(f"has endpoint {cluster.get('endpoint')}, not {existing.endpoint}")
    family = cluster.get("kubernetesNetworkConfig", {}).get("ipFamily", "ipv4")
    if family != "ipv4":
        problems.append(
            f"assigns {family} addresses to pods: the app's target group registers IPv4 pod "
            "addresses and its network policies name IPv4 CIDRs"
        )
    issuer = cluster.get("identity", {}).get("oidc", {}).get("issuer", "")
    provider_url = existing.oidc_provider_arn.partition(":oidc-provider/")[2]
    if issuer.removeprefix("https://") != provider_url:
        problems.append(f"has OIDC issuer {issuer}, which is not {provider_url}")
    checks = [
        failed(
            name,
            "; ".join(problems),
            "correct cluster.existing from `aws eks describe-cluster --name "
            f"{settings.cluster_name}` (endpoint, resourcesVpcConfig, identity.oidc.issuer); "
            "an IPv6 cluster cannot host the app (its IP family is fixed at creation)",
        )
        if problems
        else passed(name, f"ACTIVE in {config.get('vpcId')}, endpoint and issuer as given")
    ]
    checks.append(_endpoint_from_the_vpc(settings, config))
    checks.append(_kubernetes_version(settings, cluster["version"]))
    checks.append(_access_entries(settings, cluster))
    return checks


def _endpoint_from_the_vpc(settings: Settings, config: dict[str, Any]) -> Check:
    """The app's nodes join, and its kubectl handler applies manifests, from the VPC's private
    subnets. Without private endpoint access they reach the public endpoint only through NAT
    and only from addresses in publicAccessCidrs (EKS user guide, "Cluster API server
    endpoint"), which AWS cannot match against the NAT gateways here: undecided, not failed."""
    name = "existing cluster: API endpoint from the VPC"
    if config.get("endpointPrivateAccess"):
        return passed(name, "private endpoint access is on")
    cidrs = ", ".join(config.get("publicAccessCidrs", [])) or "none"
    return undecided(
        name,
        "private endpoint access is off: the nodes and the kubectl handler reach the public "
        f"endpoint through the VPC's NAT gateways, allowed only from {cidrs}",
        f"`aws eks update-cluster-config --name {settings.cluster_name} --resources-vpc-config "
        "endpointPrivateAccess=true`, or confirm that the private subnets route to NAT gateways "
        "whose addresses publicAccessCidrs allows",
    )


def _kubernetes_version(settings: Settings, version: str) -> Check:
    name = "existing cluster: Kubernetes version"
    wanted = settings.cluster.kubernetes_version
    if version == wanted:
        return passed(name, f"{version}, as cluster.kubernetes_version")
    if version in RELEASES:
        fix = (
            f"set cluster.kubernetes_version to {version}: the node groups, kubectl layer and "
            "Cluster Autoscaler follow it"
        )
    else:
        fix = (
            f"the app supports {', '.join(RELEASES)} (catalog/eks_versions.py): upgrade the "
            "cluster one minor at a time to one of them, or use a cluster that runs one"
        )
    return failed(name, f"the cluster runs {version}, the configuration says {wanted}", fix)


def _access_entries(settings: Settings, cluster: dict[str, Any]) -> Check:
    name = "existing cluster: access entries"
    mode = cluster.get("accessConfig", {}).get("authenticationMode", "CONFIG_MAP")
    if mode in ACCESS_ENTRY_MODES:
        return passed(name, f"authentication mode {mode}")
    return failed(
        name,
        f"authentication mode {mode}: the app's kubectl handler, admins and operators get "
        "access entries, which this mode ignores",
        f"`aws eks update-cluster-config --name {settings.cluster_name} --access-config "
        "authenticationMode=API_AND_CONFIG_MAP` (keeps the aws-auth ConfigMap working; a mode "
        "can only move towards API)",
    )


def oidc_provider_check(iam: Any, settings: Settings) -> Check:
    """The OIDC provider is registered in IAM and accepts IRSA's audience."""
    arn = _existing(settings).oidc_provider_arn
    name = "existing cluster: IAM OIDC provider"
    try:
        provider = iam.get_open_id_connect_provider(OpenIDConnectProviderArn=arn)
    except ClientError as error:
        return _refused(
            name,
            error,
            "register the cluster's issuer: `eksctl utils associate-iam-oidc-provider --cluster "
            f"{settings.cluster_name} --approve`, or create it in IAM with the audience "
            f"{IRSA_AUDIENCE}",
        )
    if IRSA_AUDIENCE in provider.get("ClientIDList", []):
        return passed(name, f"registered, audience {IRSA_AUDIENCE}")
    return failed(
        name,
        f"its audiences are {provider.get('ClientIDList', [])}, without {IRSA_AUDIENCE}: "
        "IRSA's tokens would be refused",
        f"`aws iam add-client-id-to-open-id-connect-provider --open-id-connect-provider-arn "
        f"{arn} --client-id {IRSA_AUDIENCE}`",
    )


def kubectl_role_check(eks: Any, settings: Settings) -> Check | None:
    """With the owner's kubectl provider (cluster.existing.kubectl_provider): its handler's
    role holds an access entry with AmazonEKSClusterAdminPolicy on the whole cluster, which the
    app's Helm charts (CRDs, ClusterRoles) and manifests need."""
    provider = _existing(settings).kubectl_provider
    if provider is None:
        return None  # the app's own handler: its access entry is in the cluster stack
    name = "existing cluster: kubectl provider's access"
    cluster, role = settings.cluster_name, provider.role_arn
    fix = (
        f"`aws eks create-access-entry --cluster-name {cluster} --principal-arn {role}` and "
        f"`aws eks associate-access-policy --cluster-name {cluster} --principal-arn {role} "
        f"--policy-arn arn:aws:eks::aws:cluster-access-policy/{CLUSTER_ADMIN_POLICY} "
        "--access-scope type=cluster`; or leave kubectl_provider out to let the app bring its "
        "own handler"
    )
    try:
        answer = eks.list_associated_access_policies(clusterName=cluster, principalArn=role)
    except ClientError as error:
        return _refused(name, error, fix)
    admin = [
        policy
        for policy in answer["associatedAccessPolicies"]
        if policy["policyArn"].endswith(f"/{CLUSTER_ADMIN_POLICY}")
        and policy["accessScope"]["type"] == "cluster"
    ]
    if admin:
        return passed(name, f"{role}: {CLUSTER_ADMIN_POLICY} on the cluster")
    held = [policy["policyArn"].rpartition("/")[2] for policy in answer["associatedAccessPolicies"]]
    return failed(
        name,
        f"{role} holds {', '.join(held) or 'no access policy'}, not {CLUSTER_ADMIN_POLICY} "
        "cluster-wide: the app's Helm charts install CRDs and ClusterRoles",
        fix,
    )


def principals_without_entries(eks: Any, settings: Settings) -> Check | None:
    """The admins and operators the app gives access entries hold none on the cluster yet:
    EKS allows one per principal, and CreateAccessEntry fails for a second."""
    cluster = settings.cluster
    principals = [*cluster.admin_principal_arns, *cluster.operator_principal_arns]
    if not principals:
        return None
    name = "existing cluster: admins' and operators' access entries"
    taken = []
    for arn in principals:
        try:
            eks.describe_access_entry(clusterName=settings.cluster_name, principalArn=arn)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                continue
            return _refused(name, error, "allow eks:DescribeAccessEntry")
        taken.append(arn)
    if not taken:
        return passed(name, f"none of the {len(principals)} holds one yet; the app creates them")
    return failed(
        name,
        f"{', '.join(taken)} already hold an access entry on {settings.cluster_name}; the "
        "app's would fail to create (one per principal)",
        "remove them from cluster.admin_principal_arns / operator_principal_arns (their access "
        "is the owner's), or delete their entries first",
    )


def addon_checks(eks: Any, settings: Settings) -> list[Check]:
    """The core add-ons as EKS manages them: a VPC CNI new enough for EFA-only interfaces that
    enforces network policies, CoreDNS and kube-proxy; and none of the managed add-ons the app
    creates (a second CreateAddon of a name fails)."""
    cluster = settings.cluster_name
    name = "existing cluster: add-ons"
    try:
        pages = eks.get_paginator("list_addons").paginate(clusterName=cluster)
        present = {addon for page in pages for addon in page["addons"]}
    except ClientError as error:
        return [_refused(name, error, "allow eks:ListAddons")]
    checks = [_vpc_cni(eks, cluster) if "vpc-cni" in present else _self_managed("vpc-cni")]
    missing = [addon for addon in CORE_ADDON_NAMES[1:] if addon not in present]
    checks.append(
        passed("existing cluster: CoreDNS and kube-proxy", "managed add-ons")
        if not missing
        else undecided(
            "existing cluster: CoreDNS and kube-proxy",
            f"{', '.join(missing)} not an EKS add-on: self-managed, or missing; AWS cannot say",
            "`kubectl -n kube-system get deploy coredns` and `get ds kube-proxy`; or install "
            f"the managed add-on (`aws eks create-addon --cluster-name {cluster} --addon-name "
            "<name>`)",
        )
    )
    clash = [addon.name for addon in OBSERVABILITY_ADDONS if addon.name in present]
    checks.append(
        failed(
            name,
            f"{', '.join(clash)} already installed: the app creates these managed add-ons "
            "(cluster stack) and EKS refuses a second one of a name",
            "the app cannot share an add-on it did not create: deploy onto a cluster without "
            "them, or, only if their owner agrees that this deployment owns them from now on "
            "(its configuration replaces theirs, and `cdk destroy` deletes them), delete them "
            "first with `aws eks delete-addon --preserve`",
        )
        if clash
        else passed(name, "none of the managed add-ons the app creates is there")
    )
    return checks


def _vpc_cni(eks: Any, cluster: str) -> Check:
    name = "existing cluster: VPC CNI"
    try:
        addon = eks.describe_addon(clusterName=cluster, addonName="vpc-cni")["addon"]
    except ClientError as error:
        return _refused(name, error, "allow eks:DescribeAddon")
    problems = []
    version = addon["addonVersion"]
    if _version(version) < VPC_CNI_FLOOR:
        floor = ".".join(str(part) for part in VPC_CNI_FLOOR)
        problems.append(f"{version} is older than {floor} (EFA-only interfaces need it)")
    if addon.get("status") != "ACTIVE":
        problems.append(f"is {addon.get('status')}, not ACTIVE")
    try:
        values = yaml.safe_load(addon.get("configurationValues") or "{}") or {}
    except yaml.YAMLError:
        values = {}
    enforced = isinstance(values, dict) and str(values.get("enableNetworkPolicy")).lower() == "true"
    if not enforced:
        problems.append(
            "enableNetworkPolicy is not 'true': the app's NetworkPolicies "
            "(manifests/network-policies.yaml) would be accepted and not enforced"
        )
    if not problems:
        return passed(name, f"{version}, network policies enforced")
    return failed(
        name,
        "; ".join(problems),
        f"`aws eks update-addon --cluster-name {cluster} --addon-name vpc-cni --addon-version "
        '<1.18.5 or later> --configuration-values \'{"enableNetworkPolicy": "true"}\'`',
    )


def _self_managed(addon: str) -> Check:
    return undecided(
        "existing cluster: VPC CNI",
        f"{addon} is not an EKS add-on (self-managed): its version and enableNetworkPolicy "
        "are not visible to AWS",
        "`kubectl -n kube-system get ds aws-node -o yaml`: image 1.18.5 or later, and the "
        "aws-network-policy-agent container with --enable-network-policy=true; or adopt it as "
        "the managed add-on",
    )


def installed_addons(settings: Settings) -> Check | None:
    """The add-ons the configuration says the cluster runs: no AWS API shows Helm releases, so
    synth's version rule is all that judged them. Said as the image mirror's registry outside
    ECR is (pdctl/image_mirror.py): one line, not checked, with where to look; the owner
    declared them, and a deploy is not held on what no check here can ever see."""
    installed = _existing(settings).addons.installed()
    if not installed:
        return None
    listed = ", ".join(f"{name} {choice.version}" for name, choice in installed.items())
    return passed(
        "existing cluster: add-ons it runs",
        f"not checked: {listed} run inside Kubernetes, which no AWS API shows; confirm each "
        f"with {IN_CLUSTER} (the device plugins must tolerate the GPU groups' taints, KubeRay "
        "must watch serving.namespace)",
    )


def existing_cluster_checks(eks: Any, iam: Any, settings: Settings) -> list[tuple[str, Any]]:
    """The planned checks, (name, call), in the order an operator fixes them."""
    return [
        ("existing cluster", lambda: cluster_checks(eks, settings)),
        ("existing cluster: IAM OIDC provider", lambda: oidc_provider_check(iam, settings)),
        ("existing cluster: kubectl provider's access", lambda: kubectl_role_check(eks, settings)),
        (
            "existing cluster: admins' and operators' access entries",
            lambda: principals_without_entries(eks, settings),
        ),
        ("existing cluster: add-ons", lambda: addon_checks(eks, settings)),
        ("existing cluster: add-ons it runs", lambda: installed_addons(settings)),
    ]


def _refused(name: str, error: ClientError, fix: str) -> Check:
    from pdctl.preflight import _refused as refused

    return refused(name, error, fix)
