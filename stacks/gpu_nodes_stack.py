"""The GPU nodes stack: the prefill and decode EFA node groups, their security group, placement
group, capacity alarms, and the tag that lets the app's Cluster Autoscaler resize them. A stack of
its own because P-instance capacity is the likeliest thing to fail a deploy (two on-demand p5 in
one placement group, a reservation not yet active): a failure here rolls back only this stack,
never the control plane or the VPC, and a retry is minutes instead of a new cluster."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns

from app_config import Settings
from app_config.derived_names import gpu_nodes_below_desired_alarm
from constructs import Construct
from constructs.common.auto_scaling_group import DeploymentTag, harden_lookup_provider
from constructs.gpu_nodes.cluster_placement_group import ClusterPlacementGroup
from constructs.gpu_nodes.efa_node_group import EfaNodeGroup, EfaNodeGroupProps
from constructs.gpu_nodes.efa_security_group import EfaSecurityGroup
from constructs.gpu_nodes.node_group_capacity_alarm import NodeGroupCapacityAlarm
from stacks.common import removal_policy


class GpuNodesStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        vpc: ec2.IVpc,
        gpu_subnets: ec2.SubnetSelection,
        cluster: eks.ICluster,
        node_role: iam.IRole,
        topic: sns.ITopic,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
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
        self.node_groups = {
            role: EfaNodeGroup(
                self,
                f"{role.capitalize()}Nodes",
                EfaNodeGroupProps(
                    role=role,
                    settings=group,
                    cluster=cluster,
                    kubernetes_version=settings.cluster.kubernetes_version,
                    node_role=node_role,
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
        self.capacity_alarms = {
            role: NodeGroupCapacityAlarm(
                self,
                f"{role.capitalize()}NodesCapacityAlarm",
                cluster_name=settings.cluster_name,
                alarm_name=gpu_nodes_below_desired_alarm(settings.prefix, role),
                nodegroup=group.nodegroup,
                role=role,
                minutes=settings.observability.alarms.node_shortfall_minutes,
                topic=topic,
            ).alarm
            for role, group in self.node_groups.items()
        }
        # The autoscaler resizes these groups only with this deployment's tag on them.
        self.deployment_tags = {
            role: DeploymentTag(
                self,
                f"{role.capitalize()}NodesDeploymentTag",
                cluster_name=settings.cluster_name,
                nodegroup=group.nodegroup,
                prefix=settings.prefix,
            )
            for role, group in self.node_groups.items()
        }
        harden_lookup_provider(
            self,
            removal_policy=removal_policy(settings),
            key_description="Encrypts the GPU node groups' lookup function logs",
        )
