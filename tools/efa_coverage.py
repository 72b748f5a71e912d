"""EFA coverage measured on synthesized launch templates: EFA interfaces attached / network
cards of the instance, for every catalog type (the goal is 1.00 everywhere).

The node groups are rendered offline on an imported cluster, one stack and one synth for all of
them; tests/stacks/test_efa_node_groups.py uses the same renderer.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from app_config.model import GpuNodeGroup
from catalog.efa_layout import EFA, EFA_ONLY
from catalog.eks_versions import DEFAULT_MINOR
from catalog.instances import CATALOG
from constructs.gpu_nodes.efa_node_group import EfaNodeGroup, EfaNodeGroupProps

Key = TypeVar("Key", bound=Hashable)

# Identifiers of an imported cluster: the render needs values, not real resources.
CLUSTER_SECURITY_GROUP = "sg-0c1c1c1c1c1c1c1c1"
EFA_SECURITY_GROUP = "sg-0efa0efa0efa0efa0"
PLACEMENT_GROUP = "pg-offline"


def render_efa_node_groups(
    groups: Mapping[Key, GpuNodeGroup], tags: dict[str, str] | None = None
) -> dict[Key, tuple[dict, dict]]:
    """(launch template data, node group properties) for each configured node group."""
    stack = cdk.Stack(cdk.App(), "EfaNodeGroups", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-west-2a"],
        private_subnet_ids=["subnet-0123456789abcdef0"],
    )  # fmt: skip
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="offline", cluster_security_group_id=CLUSTER_SECURITY_GROUP,
        vpc=vpc,
    )  # fmt: skip
    node_role = iam.Role.from_role_arn(stack, "NodeRole", "arn:aws:iam::123456789012:role/node")
    constructs = {
        key: EfaNodeGroup(
            stack,
            f"Group{index}",
            EfaNodeGroupProps(
                role="prefill",
                settings=group,
                cluster=cluster,
                kubernetes_version=DEFAULT_MINOR,
                node_role=node_role,
                subnets=ec2.SubnetSelection(subnets=vpc.private_subnets),
                efa_security_group_id=EFA_SECURITY_GROUP,
                placement_group_name=PLACEMENT_GROUP,
                tags=tags or {},
            ),
        )
        for index, (key, group) in enumerate(groups.items())
    }
    resources = cdk.assertions.Template.from_stack(stack).to_json()["Resources"]

    def properties(element: cdk.CfnElement) -> dict:
        return resources[stack.resolve(element.logical_id)]["Properties"]

    return {
        key: (
            properties(group.launch_template)["LaunchTemplateData"],
            properties(group.nodegroup.node.default_child),
        )
        for key, group in constructs.items()
    }


def efa_rails(launch_template_data: dict) -> int:
    return sum(
        interface["InterfaceType"] in (EFA, EFA_ONLY)
        for interface in launch_template_data["NetworkInterfaces"]
    )


def efa_coverage() -> dict[str, float]:
    rendered = render_efa_node_groups({name: GpuNodeGroup(instance_type=name) for name in CATALOG})
    return {
        name: efa_rails(data) / CATALOG[name].network_cards for name, (data, _) in rendered.items()
    }
