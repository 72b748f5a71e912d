"""The network stack: changes almost never, so it is deployed and updated on its own."""

from __future__ import annotations

from aws_cdk import Stack

from app_config import Settings
from constructs import Construct
from constructs.network.existing_vpc import ExistingGpuVpc
from constructs.network.gpu_vpc import GpuVpc, GpuVpcProps
from stacks.common import removal_policy


class NetworkStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self._zones = list(settings.network.availability_zones)
        # With an existing VPC the stack holds only what the app adds to it: the interface
        # endpoints, unless they exist (constructs/network/existing_vpc.py).
        self.network: GpuVpc | ExistingGpuVpc = (
            GpuVpc(
                self,
                "Network",
                GpuVpcProps(network=settings.network, removal_policy=removal_policy(settings)),
            )
            if settings.network.existing_vpc is None
            else ExistingGpuVpc(
                self,
                "Network",
                network=settings.network,
                internet_facing=settings.serving.endpoint.load_balancer_internet_facing,
            )
        )

    @property
    def availability_zones(self) -> list[str]:
        """The configured zones. Without this override an account-bound stack would look the
        zones up in AWS at synth time, which needs credentials."""
        return self._zones
