"""The CPU node group for cluster services: CoreDNS, operators, controllers, the Ray head."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from app_config.model import SystemNodes
from app_config.node_labels import ROLE_LABEL, SYSTEM_ROLE
from constructs import Construct

# AL2023's root device; a launch template volume under another name would be a second disk.
AL2023_ROOT_DEVICE = "/dev/xvda"


class SystemNodeGroup(Construct):
    """Publishes ``nodegroup`` and ``labels`` (what system workloads select)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        kubernetes_version: str,  # the cluster's minor; the nodes run the same
        settings: SystemNodes,
        node_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        self.labels = {ROLE_LABEL: SYSTEM_ROLE}
        # The instance type lives in the launch template, not on the node group, where EKS treats
        # it as immutable: a new type is then a new template version that EKS rolls out one node
        # at a time, instead of a new node group replacing the one CoreDNS and the Ray head run
        # on (AWS::EKS::Nodegroup InstanceTypes is create-only).
        launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            instance_type=ec2.InstanceType(settings.instance_type),
            require_imdsv2=True,
            # Hop limit 1: containers cannot reach the node's instance credentials.
            http_put_response_hop_limit=1,
            block_devices=[
                ec2.BlockDevice(
                    device_name=AL2023_ROOT_DEVICE,
                    volume=ec2.BlockDeviceVolume.ebs(
                        settings.disk_size_gib,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        encrypted=True,
                        delete_on_termination=True,
                    ),
                )
            ],
        )
        scaling = settings.scaling
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            capacity_type=eks.CapacityType.ON_DEMAND,
            launch_template_spec=eks.LaunchTemplateSpec(
                id=launch_template.launch_template_id,
                version=launch_template.latest_version_number,
            ),
            node_role=node_role,
            min_size=scaling.min_size,
            desired_size=scaling.desired_size,
            max_size=scaling.max_size,
            max_unavailable=1,
            # Respect CoreDNS's disruption budget. The Ray head has none (a single head's budget
            # could only block the drain): an update moves it, which without GCS fault
            # tolerance restarts every engine (docs/operating.md, "What a Kubernetes version
            # upgrade costs").
            force_update=False,
            enable_node_auto_repair=True,
            labels=self.labels,
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        )
        # Follows the cluster's version visibly (docs/operating.md, "Upgrading"); on-demand CPU
        # capacity makes EKS's default surge update safe here.
        self.nodegroup.node.default_child.add_property_override("Version", kubernetes_version)
