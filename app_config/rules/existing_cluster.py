"""An existing cluster (cluster.existing): what synth can check without an AWS account.

Synth imports the cluster from the attributes given (aws-cdk-lib 2.275 `Cluster.
from_cluster_attributes`, no lookup); `pdctl preflight` checks them against the account (the
cluster exists in this VPC at this version, its OIDC provider is registered in IAM, its
authentication mode takes access entries, its core add-ons and network policy support;
pdctl/existing_cluster.py).

Sources: EKS API reference, CreateCluster (names); EKS user guide, "Create an IAM OIDC provider
for your cluster" (the provider's URL is the cluster's issuer, oidc.eks.<region>.amazonaws.com/id/
<ID>); EC2 user guide, "Resource IDs" (security group ids); kubernetes/autoscaler
cluster-autoscaler/README.md, "Releases" (run the autoscaler of the control plane's minor).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.rules import WARNING, Rule
from catalog.eks_versions import RELEASES
from catalog.helm_charts import (
    ADDON_FLOORS,
    NVIDIA_MOFED_BY_DEFAULT,
    AddonFloor,
    efa_device_plugin_floor,
)
from catalog.regions import partition

if TYPE_CHECKING:
    from app_config.model import Settings

PATH = "cluster.existing"
# arn:<partition>:iam::<account>:oidc-provider/oidc.eks.<region>.amazonaws.com/id/<32 hex>
OIDC_PROVIDER_ARN = re.compile(
    r"arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):oidc-provider/"
    r"oidc\.eks\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/id/(?P<id>[0-9A-F]{32})"
)
# https://<32 hex>.<2-3 characters>.<region>.eks.amazonaws.com (what DescribeCluster returns)
ENDPOINT = re.compile(
    r"https://(?P<id>[0-9A-F]{32})\.[a-z0-9]{2,4}\.(?P<region>[a-z0-9-]+)\.eks\.amazonaws\.com"
)
_SECURITY_GROUP = re.compile(r"sg-[0-9a-f]{8}(?:[0-9a-f]{9})?")
LAMBDA_FUNCTION_ARN = re.compile(
    r"arn:(?P<partition>aws[a-z-]*):lambda:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):"
    r"function:[A-Za-z0-9_-]{1,64}(?::[A-Za-z0-9$_-]{1,128})?"
)
ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::(?P<account>\d{12}):role/[\w+=,.@/-]{1,576}")


def needs_existing_vpc(settings: Settings) -> Iterator[Finding]:
    """An existing cluster lives in a VPC the app did not create: the app's VPC would be a new
    one the cluster has no interfaces in."""
    if settings.cluster.existing is not None and settings.network.existing_vpc is None:
        yield Finding(
            PATH,
            "an existing cluster runs in its own VPC: give that VPC as network.existing_vpc "
            "(its subnets, the GPU subnet, the load balancer's subnets), or leave "
            "cluster.existing out to let the app create both",
        )


def identity(settings: Settings) -> Iterator[Finding]:
    """The cluster's name, and ids and ARNs in the formats AWS gives them, of this region."""
    existing = settings.cluster.existing
    if existing is None:
        return
    if settings.cluster.name is None:
        yield Finding(
            "cluster.name",
            "with cluster.existing, the name of that cluster is required (it would otherwise "
            "default to the prefix): `aws eks list-clusters` lists them",
        )
    group = existing.cluster_security_group_id
    if not _SECURITY_GROUP.fullmatch(group):
        yield Finding(
            f"{PATH}.cluster_security_group_id",
            "not a security group id: 'sg-' and 8 or 17 lower-case hexadecimal characters "
            "(EC2 user guide, 'Resource IDs'), e.g. sg-0123456789abcdef0",
            group,
        )
    arn = yield from _arn_of_this_deployment(
        settings,
        OIDC_PROVIDER_ARN,
        existing.oidc_provider_arn,
        f"{PATH}.oidc_provider_arn",
        "not an EKS cluster's IAM OIDC provider ARN: arn:aws:iam::<account>:oidc-provider/"
        "oidc.eks.<region>.amazonaws.com/id/<32 hexadecimal capitals> (`aws iam "
        "list-open-id-connect-providers`)",
    )
    endpoint = ENDPOINT.fullmatch(existing.endpoint)
    if endpoint is None:
        yield Finding(
            f"{PATH}.endpoint",
            "not an EKS API server URL: https://<32 hexadecimal capitals>.<zone code>.<region>"
            ".eks.amazonaws.com (`aws eks describe-cluster --query cluster.endpoint`)",
            existing.endpoint,
        )
    elif endpoint["region"] != settings.region:
        yield Finding(
            f"{PATH}.endpoint",
            f"is a cluster of {endpoint['region']}, not of region {settings.region}: the app's "
            "node groups join a cluster of their own region",
            existing.endpoint,
        )
    elif arn is not None and arn["id"] != endpoint["id"]:
        yield Finding(
            f"{PATH}.oidc_provider_arn",
            f"is the provider of issuer id {arn['id']}, but the endpoint's cluster has id "
            f"{endpoint['id']} (a cluster's issuer and endpoint share it): give the provider of "
            "this cluster's issuer (`aws eks describe-cluster --query cluster.identity.oidc`)",
            existing.oidc_provider_arn,
        )


def kubectl_provider(settings: Settings) -> Iterator[Finding]:
    """An owner's kubectl provider: a Lambda function of this region and a role, of the
    deployment's account where it is known."""
    existing = settings.cluster.existing
    if existing is None or existing.kubectl_provider is None:
        return
    provider = existing.kubectl_provider
    path = f"{PATH}.kubectl_provider"
    yield from _arn_of_this_deployment(
        settings,
        LAMBDA_FUNCTION_ARN,
        provider.service_token,
        f"{path}.service_token",
        "not a Lambda function ARN: arn:aws:lambda:<region>:<account>:function:<name> "
        "(the provider's onEvent function)",
    )
    role = ROLE_ARN.fullmatch(provider.role_arn)
    if role is None:
        yield Finding(
            f"{path}.role_arn",
            "not an IAM role ARN: arn:aws:iam::<account>:role/<name>",
            provider.role_arn,
        )
    elif settings.account is not None and role["account"] != settings.account:
        yield Finding(
            f"{path}.role_arn",
            f"is in account {role['account']}, not in account {settings.account}: access "
            "entries name principals of the cluster's account",
            provider.role_arn,
        )


def _arn_of_this_deployment(
    settings: Settings, shape: re.Pattern[str], value: str, path: str, not_shaped: str
) -> Generator[Finding, None, re.Match[str] | None]:
    """An ARN setting: of the shape AWS gives it (else ``not_shaped``), in this deployment's
    partition, region and account. Returns the match (None when the shape is wrong), for the
    caller's own checks of its parts."""
    arn = shape.fullmatch(value)
    if arn is None:
        yield Finding(path, not_shaped, value)
    else:
        yield from _of_this_deployment(settings, arn, path)
    return arn


def _of_this_deployment(settings: Settings, arn: re.Match[str], path: str) -> Iterator[Finding]:
    region, account = settings.region, settings.account
    if arn["region"] != region or arn["partition"] != partition(region):
        yield Finding(
            path,
            f"is in {arn['region']} ({arn['partition']}), not in region {region}: give the "
            "one of the cluster named here",
            arn.group(0),
        )
    elif account is not None and arn["account"] != account:
        yield Finding(
            path,
            f"is in account {arn['account']}, not in account {account}: the deployment's "
            "stacks and the cluster are of one account",
            arn.group(0),
        )


def created_only_settings(settings: Settings) -> Iterator[Finding]:
    """Settings that shape a control plane the app creates: changed beside an existing cluster
    they would do nothing, and a reader would believe they do. (Changed from the default, not
    given: the loader fills a given section from its defaults.)"""
    from app_config.model import CREATED_CLUSTER_SETTINGS, Cluster

    cluster = settings.cluster
    if cluster.existing is None:
        return
    for name in CREATED_CLUSTER_SETTINGS:
        value = getattr(cluster, name)
        if value != Cluster.model_fields[name].default:
            yield Finding(
                f"cluster.{name}",
                "shapes a control plane the app creates; with cluster.existing the control "
                "plane is yours and this setting would change nothing: remove it",
                [str(item) for item in value] if isinstance(value, list) else value,
            )


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.lstrip("v").split("."))


def _floor(settings: Settings, name: str) -> AddonFloor:
    """The EFA device plugin's floor follows the GPU instance types configured; the others'
    are fixed (catalog/helm_charts.py)."""
    if name == "efa_device_plugin":
        return efa_device_plugin_floor(
            [group.instance_type for group in settings.gpu_nodes.groups().values()]
        )
    return ADDON_FLOORS[name]


def nvidia_mofed(settings: Settings) -> Iterator[Finding]:
    """An owner's NVIDIA device plugin of the releases that enable MOFED by default takes the
    EFA devices unless it runs with mofedEnabled=false, which no setting or AWS API shows."""
    existing = settings.cluster.existing
    if existing is None:
        return
    choice = existing.addons.nvidia_device_plugin
    if choice.source != "installed" or choice.version is None:
        return
    first, fixed = NVIDIA_MOFED_BY_DEFAULT
    if _version(first) <= _version(choice.version) < _version(fixed):
        yield Finding(
            f"{PATH}.addons.nvidia_device_plugin.version",
            f"releases {first} to before {fixed} default to --mofed-enabled=true "
            "(NVIDIA/k8s-device-plugin#1550, reverted by #1837): GPU containers then get "
            "/dev/infiniband/uverbs* and EFA breaks. Check that it runs with "
            "mofedEnabled=false (`kubectl -n <namespace> get ds -o yaml`: MOFED_ENABLED=false), "
            f"or upgrade to {fixed}",
            choice.version,
        )


def addons(settings: Settings) -> Iterator[Finding]:
    """An add-on the owner runs names its version, and that version is one the app works with:
    not older than the oldest release with what the app relies on (catalog/helm_charts.py,
    each floor with its source), the Cluster Autoscaler of the cluster's minor."""
    existing = settings.cluster.existing
    if existing is None:
        return
    minor = settings.cluster.kubernetes_version
    for name, choice in existing.addons.installed().items():
        path = f"{PATH}.addons.{name}"
        if choice.version is None:
            yield Finding(
                f"{path}.version",
                "is required with source installed: the version that runs (`helm list -A`, "
                "APP VERSION), so that the app can say whether it works with it",
            )
            continue
        if name == "cluster_autoscaler":
            wanted = RELEASES[minor].cluster_autoscaler_image_tag
            if _version(choice.version)[:2] != _version(wanted)[:2]:
                yield Finding(
                    f"{path}.version",
                    f"is not of the cluster's Kubernetes minor {minor}: the Cluster Autoscaler "
                    "is built for one minor (the Releases section of kubernetes/autoscaler's "
                    "cluster-autoscaler README); run "
                    f"{wanted}, or set source install to let the app run it",
                    choice.version,
                )
            continue
        floor = _floor(settings, name)
        if floor.minimum is not None and _version(choice.version) < _version(floor.minimum):
            yield Finding(
                f"{path}.version",
                f"is older than {floor.minimum}: {floor.why} ({floor.source}). Upgrade it, or "
                "set source install to let the app install its own",
                choice.version,
            )
    for name in type(existing.addons).model_fields:
        choice = getattr(existing.addons, name)
        for setting in ("version", "namespace"):
            value = getattr(choice, setting)
            if choice.source == "install" and value is not None:
                yield Finding(
                    f"{PATH}.addons.{name}.{setting}",
                    f"with source install the app installs its pinned release where "
                    f"catalog/helm_charts.py says; a {setting} here would change nothing: "
                    "remove it",
                    value,
                )


def serving_namespace_of_its_own(settings: Settings) -> Iterator[Finding]:
    """The serving namespace is the app's: it gets Pod Security labels and a deny-all network
    policy, and `cdk destroy` deletes it with all it holds. The namespace of an add-on the
    owner runs is the owner's (the reserved names of app_config/serving.py cover the app's own
    charts' namespaces, where an add-on without a namespace runs)."""
    existing = settings.cluster.existing
    if existing is None:
        return
    wanted = settings.serving.namespace
    for name, choice in existing.addons.installed().items():
        if choice.namespace == wanted:
            yield Finding(
                "serving.namespace",
                f"is {PATH}.addons.{name}.namespace, where the owner's {name} runs: the app "
                "would label it, deny its traffic and delete it with everything in it on `cdk "
                "destroy`. Use a namespace of the app's own, such as llm-serving",
                wanted,
            )


RULES = (
    Rule("existing-cluster-vpc", frozenset({"cluster", "network"}), needs_existing_vpc),
    Rule("existing-cluster-ids", frozenset({"cluster", "region", "account"}), identity),
    Rule("existing-cluster-kubectl", frozenset({"cluster", "region", "account"}), kubectl_provider),
    Rule("existing-cluster-created-only", frozenset({"cluster"}), created_only_settings),
    Rule("existing-cluster-addons", frozenset({"cluster", "gpu_nodes"}), addons),
    Rule(
        "existing-cluster-serving-namespace",
        frozenset({"cluster", "serving"}),
        serving_namespace_of_its_own,
    ),
    Rule(
        "existing-cluster-nvidia-mofed",
        frozenset({"cluster"}),
        nvidia_mofed,
        severity=WARNING,
        stack="serving",
    ),
)
