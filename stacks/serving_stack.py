"""The serving stack: Kubernetes resources on the cluster; changes with model and image."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks

from app_config import Settings
from constructs import Construct
from constructs.device_plugins import DevicePlugins


class ServingStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        gpu_groups = settings.gpu_nodes.groups()
        self.device_plugins = DevicePlugins(
            self,
            "DevicePlugins",
            cluster=cluster,
            gpu_placements=[group.placement(role) for role, group in gpu_groups.items()],
        )
