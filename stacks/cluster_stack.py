"""The cluster stack: control plane, node groups and add-ons; changes with capacity."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2

from app_config import Settings
from constructs import Construct
from constructs.alarm_topic import AlarmTopic
from constructs.checkov_skips import AWS_CUSTOM_RESOURCE_PROVIDER_ID
from constructs.cluster_placement_group import ClusterPlacementGroup
from constructs.core_addons import CoreAddons
from constructs.efa_node_group import EfaNodeGroup, EfaNodeGroupProps
from constructs.efa_security_group import EfaSecurityGroup
from constructs.eks_control_plane import EksControlPlane, EksControlPlaneProps
from constructs.encrypted_log_group import encrypt_log_groups_under
from constructs.log_encryption_key import LogEncryptionKey
from constructs.nag_acknowledgments import acknowledge, aws_managed_policy_finding
from constructs.node_group_capacity_alarm import NodeGroupCapacityAlarm
from constructs.node_role import NodeRole
from constructs.observability_addons import ObservabilityAddons, ObservabilityAddonsProps
from constructs.system_node_group import SystemNodeGroup
from stacks.common import removal_policy


class ClusterStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        vpc: ec2.IVpc,
        gpu_subnets: ec2.SubnetSelection,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.control_plane = EksControlPlane(
            self,
            "ControlPlane",
            EksControlPlaneProps(
                cluster_name=settings.cluster_name,
                settings=settings.cluster,
                vpc=vpc,
                removal_policy=removal_policy(settings),
            ),
        )
        cluster = self.control_plane.cluster
        self.addons = CoreAddons(self, "Addons", cluster=cluster)
        self.node_role = NodeRole(self, "NodeRole", description="Nodes of the serving cluster")
        self.system_nodes = SystemNodeGroup(
            self,
            "SystemNodes",
            cluster=cluster,
            settings=settings.cluster.system_nodes,
            node_role=self.node_role.role,
        )
        self.efa_security_group = EfaSecurityGroup(
            self,
            "EfaSecurityGroup",
            vpc=vpc,
            description="EFA traffic between prefill and decode nodes, and nothing else",
        )
        on_demand = [
            g for g in settings.gpu_nodes.groups().values() if g.capacity.type == "on_demand"
        ]
        self.placement_group = (
            ClusterPlacementGroup(self, "GpuPlacementGroup") if on_demand else None
        )
        self.gpu_node_groups = {
            role: EfaNodeGroup(
                self,
                f"{role.capitalize()}Nodes",
                EfaNodeGroupProps(
                    role=role,
                    settings=group,
                    cluster=cluster,
                    node_role=self.node_role.role,
                    subnets=gpu_subnets,
                    efa_security_group_id=self.efa_security_group.security_group_id,
                    placement_group_name=self.placement_group.name
                    if self.placement_group
                    else None,
                    tags=settings.tags,
                ),
            )
            for role, group in settings.gpu_nodes.groups().items()
        }
        # Networking first (a node without the CNI never turns Ready), CoreDNS once nodes exist
        # (its pods would otherwise leave the add-on DEGRADED and the deployment failing).
        nodegroups = [self.system_nodes.nodegroup] + [
            group.nodegroup for group in self.gpu_node_groups.values()
        ]
        for nodegroup in nodegroups:
            for addon in self.addons.needed_by_nodes:
                nodegroup.node.add_dependency(addon)
        for addon in self.addons.needing_nodes:
            addon.node.add_dependency(self.system_nodes.nodegroup)
        self._observability(settings)
        self._outputs(settings)

    def _observability(self, settings: Settings) -> None:
        """Node-level watching lives with the nodes: the add-ons, and an alarm per GPU node group
        on the group's Auto Scaling group, whose name changes when the group is replaced and so
        must not cross stacks. The alarms themselves are exported; their ARNs come from fixed
        names and stay put."""
        cluster = self.control_plane.cluster
        log_key = LogEncryptionKey(
            self,
            "ContainerInsightsLogKey",
            description="Encrypts the Container Insights log groups",
            removal_policy=removal_policy(settings),
        ).key
        self.observability_addons = ObservabilityAddons(
            self,
            "ObservabilityAddons",
            ObservabilityAddonsProps(
                cluster=cluster,
                cluster_name=settings.cluster_name,
                settings=settings.observability,
                gpu_placements=[group.placement for group in self.gpu_node_groups.values()],
                log_key=log_key,
                removal_policy=removal_policy(settings),
            ),
        )
        for addon in self.observability_addons.addons:
            addon.node.add_dependency(self.system_nodes.nodegroup)
        self.alarm_topic = AlarmTopic(
            self,
            "AlarmTopic",
            emails=[str(email) for email in settings.observability.alarms.emails],
            removal_policy=removal_policy(settings),
        )
        self.node_group_alarms = {
            role: NodeGroupCapacityAlarm(
                self,
                f"{role.capitalize()}NodesCapacityAlarm",
                cluster_name=settings.cluster_name,
                alarm_name=f"{settings.prefix}-{role}-gpu-nodes-below-desired",
                nodegroup=group.nodegroup,
                role=role,
                minutes=settings.observability.alarms.node_shortfall_minutes,
                topic=self.alarm_topic.topic,
            ).alarm
            for role, group in self.gpu_node_groups.items()
        }
        lookups = self.node.find_child(AWS_CUSTOM_RESOURCE_PROVIDER_ID)
        encrypt_log_groups_under(lookups, log_key)
        acknowledge(
            lookups,
            aws_managed_policy_finding("service-role/AWSLambdaBasicExecutionRole"),
            "aws-cdk-lib's AwsCustomResource handler (the node groups' Auto Scaling group names) "
            "writes its own logs with the AWS managed Lambda execution policy; it runs only "
            "while CloudFormation updates this stack.",
        )

    def _outputs(self, settings: Settings) -> None:
        cluster = self.control_plane.cluster
        admin_role = self.control_plane.admin_role
        CfnOutput(self, "ClusterName", value=cluster.cluster_name)
        CfnOutput(
            self,
            "AdminRoleArn",
            value=admin_role.role_arn,
            description="Assume this role for kubectl (cluster-admin access entry)",
        )
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --name {settings.cluster_name} "
            f"--region {settings.region} --role-arn {admin_role.role_arn}",
        )
