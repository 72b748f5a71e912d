"""An EFA-enabled GPU managed node group: one concept, used twice (prefill and decode).

What aws-cdk-lib 2.275 cannot do for these instances, and how this construct gets around it:
- ``aws_eks_v2.Nodegroup`` rejects ``p5.48xlarge`` with the NVIDIA AMI type
  (AmiTypeDoesNotMatchInstanceArchitecture) and cannot parse ``p6-b200.48xlarge``; so the instance
  type goes into the launch template as a plain string and the AMI type is set explicitly.
- The L2 ``ec2.LaunchTemplate`` has no network interfaces; so this is a ``CfnLaunchTemplate``.
- EKS adds the cluster security group only when the launch template names none; since every
  interface names the EFA group, the cluster group is named on every interface too.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
import yaml
from aws_cdk import Fn
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from app_config.model import GpuNodeGroup, NodePlacement
from app_config.node_template import node_template_tags
from catalog.efa_layout import efa_interface_layout
from catalog.instances import GpuInstance
from constructs import Construct
from constructs.cluster.system_node_group import AL2023_ROOT_DEVICE

# Only for a type without local NVMe, where the root volume would hold the 20+ GB image: well
# above gp3's baseline (3,000 IOPS, 125 MiB/s). With NVMe, nodeadm's RAID0 takes containerd and
# kubelet, and the root volume keeps gp3's included baseline.
IMAGE_VOLUME_IOPS = 16000
IMAGE_VOLUME_THROUGHPUT_MIBPS = 1000

MIME_BOUNDARY = "==NODEADM=="

CAPACITY_TYPES = {
    "on_demand": eks.CapacityType.ON_DEMAND,
    "capacity_reservation": eks.CapacityType.ON_DEMAND,
    "capacity_block": eks.CapacityType.CAPACITY_BLOCK,
}


@dataclass(frozen=True)
class EfaNodeGroupProps:
    role: str  # "prefill" or "decode"
    settings: GpuNodeGroup
    cluster: eks.ICluster
    kubernetes_version: str  # the cluster's minor; the nodes run the same
    node_role: iam.IRole
    subnets: ec2.SubnetSelection  # the GPU zone's private subnet
    efa_security_group_id: str
    placement_group_name: str | None  # required when capacity is on demand
    tags: dict[str, str]  # for the instances, volumes and interfaces the template launches


class EfaNodeGroup(Construct):
    """Publishes ``nodegroup``, ``instance`` (catalog facts) and ``placement`` (labels and taints
    the Ray worker group must select and tolerate)."""

    def __init__(self, scope: Construct, construct_id: str, props: EfaNodeGroupProps) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        if settings.capacity.type == "on_demand" and not props.placement_group_name:
            raise ValueError(f"{props.role}: on-demand capacity needs a placement group name")
        self.instance: GpuInstance = settings.instance
        self.placement: NodePlacement = settings.placement(props.role)
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=self._launch_template_data(props),
        )
        scaling = settings.scaling
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=props.cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=CAPACITY_TYPES[settings.capacity.type],
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref,
                version=self.launch_template.attr_latest_version_number,
            ),
            node_role=props.node_role,
            subnets=props.subnets,
            min_size=scaling.min_size,
            desired_size=scaling.desired_size,
            max_size=scaling.max_size,
            max_unavailable=1,
            # A node update waits for the PodDisruptionBudgets (and fails after EKS's 15
            # minutes) instead of evicting a side's last serving pods; aws-cdk-lib's default
            # is to force.
            force_update=False,
            enable_node_auto_repair=True,
            labels=self.placement.labels,
            # Read by the Cluster Autoscaler to scale the group from zero (node_template.py).
            tags=node_template_tags(self.instance.gpus, self.instance.network_cards),
            taints=[
                eks.TaintSpec(key=t.key, value=t.value, effect=_TAINT_EFFECTS[t.effect])
                for t in self.placement.taints
            ],
        )
        cfn = self.nodegroup.node.default_child
        # Repair one GPU node at a time: the other keeps its side serving meanwhile.
        cfn.add_property_override("NodeRepairConfig.MaxParallelNodesRepairedCount", 1)
        cfn.add_property_override("UpdateConfig.UpdateStrategy", update_strategy(settings))
        # The nodes' Kubernetes version, written down: a cluster upgrade then shows as a
        # node group change in `cdk diff` (docs/operating.md, "Upgrading") instead of nodes
        # left behind.
        cfn.add_property_override("Version", props.kubernetes_version)

    def _launch_template_data(
        self, props: EfaNodeGroupProps
    ) -> ec2.CfnLaunchTemplate.LaunchTemplateDataProperty:
        settings = props.settings
        security_groups = [props.cluster.cluster_security_group_id, props.efa_security_group_id]
        capacity = settings.capacity
        return ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            instance_type=self.instance.name,
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_tokens="required",
                http_put_response_hop_limit=1,  # containers cannot reach node credentials
                http_endpoint="enabled",
            ),
            block_device_mappings=[
                ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name=AL2023_ROOT_DEVICE,
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=settings.root_volume_gib,
                        volume_type="gp3",
                        iops=None if self.instance.has_local_nvme else IMAGE_VOLUME_IOPS,
                        throughput=None
                        if self.instance.has_local_nvme
                        else IMAGE_VOLUME_THROUGHPUT_MIBPS,
                        encrypted=True,
                        delete_on_termination=True,
                    ),
                )
            ],
            # No SubnetId: EKS rejects it in a managed node group's launch template.
            network_interfaces=[
                ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                    network_card_index=slot.network_card_index,
                    device_index=slot.device_index,
                    interface_type=slot.interface_type,
                    groups=security_groups,
                    delete_on_termination=True,
                )
                for slot in efa_interface_layout(self.instance)
            ],
            placement=(
                ec2.CfnLaunchTemplate.PlacementProperty(group_name=props.placement_group_name)
                if capacity.type == "on_demand"
                # A reservation replaces the stack's placement group (ClusterPlacementGroup);
                # one made in a cluster placement group must be launched into that group.
                else ec2.CfnLaunchTemplate.PlacementProperty(group_name=capacity.placement_group)
                if capacity.placement_group
                else None
            ),
            capacity_reservation_specification=(
                ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                    capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                        capacity_reservation_id=capacity.reservation_id
                    )
                )
                if capacity.reservation_id
                else None
            ),
            instance_market_options=(
                ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
                if capacity.type == "capacity_block"
                else None
            ),
            # Stack tags reach the launch template resource, not what it launches.
            tag_specifications=[
                ec2.CfnLaunchTemplate.TagSpecificationProperty(
                    resource_type=resource_type,
                    tags=[cdk.CfnTag(key=key, value=value) for key, value in props.tags.items()],
                )
                for resource_type in ("instance", "volume", "network-interface")
            ]
            if props.tags
            else None,
            user_data=(
                Fn.base64(nodeadm_user_data(RAID0_NODE_CONFIG))
                if self.instance.has_local_nvme
                else None
            ),
        )


def update_strategy(settings: GpuNodeGroup) -> str:
    """MINIMAL where capacity is reserved: EKS's DEFAULT update launches new nodes before it
    removes old ones, and a reservation or Capacity Block sized to the node count has no
    instance to spare, so every later update of the group would fail. On demand, DEFAULT: the
    side keeps serving on its old node while the new one starts, and if AWS has no spare p-class
    capacity the update fails and leaves the old nodes running (EKS user guide, "Understand
    each phase of node updates")."""
    return "DEFAULT" if settings.capacity.type == "on_demand" else "MINIMAL"


_TAINT_EFFECTS = {
    "NoSchedule": eks.TaintEffect.NO_SCHEDULE,
    "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
    "NoExecute": eks.TaintEffect.NO_EXECUTE,
}


# AL2023 nodeadm RAID0s the local NVMe disks and puts kubelet and containerd state on the array
# (nodeadm API, NodeConfig ``spec.instance.localStorage``): room for model weights.
RAID0_NODE_CONFIG = {
    "apiVersion": "node.eks.aws/v1alpha1",
    "kind": "NodeConfig",
    "spec": {"instance": {"localStorage": {"strategy": "RAID0"}}},
}


def nodeadm_user_data(node_config: dict) -> str:
    """One MIME part that EKS merges with its own bootstrap part. Managed node groups require
    MIME multipart user data on AL2023 (EKS user guide, "Customize managed nodes with launch
    templates")."""
    return "\n".join(
        [
            "MIME-Version: 1.0",
            f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"',
            "",
            f"--{MIME_BOUNDARY}",
            "Content-Type: application/node.eks.aws",
            "",
            "---",
            yaml.safe_dump(node_config, sort_keys=False).rstrip(),
            "",
            f"--{MIME_BOUNDARY}--",
            "",
        ]
    )
