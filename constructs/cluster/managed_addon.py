"""One EKS managed add-on at a pinned build; the one place that knows aws_eks_v2.Addon's gaps."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from catalog.eks_versions import ManagedAddon
from constructs import Construct


def managed_addon(
    scope: Construct,
    cluster: eks.ICluster,
    addon: ManagedAddon,
    *,
    configuration: dict[str, Any] | None = None,
    service_account_role: iam.IRole | None = None,
) -> eks.Addon:
    construct = eks.Addon(
        scope,
        addon.name,
        cluster=cluster,
        addon_name=addon.name,
        addon_version=addon.version,
        configuration_values=configuration,
        preserve_on_delete=False,
    )
    # aws_eks_v2.Addon (2.275) exposes neither ResolveConflicts nor a service account role.
    cfn = construct.node.default_child
    cfn.add_property_override("ResolveConflicts", "OVERWRITE")
    if service_account_role is not None:
        cfn.add_property_override("ServiceAccountRoleArn", service_account_role.role_arn)
    return construct
