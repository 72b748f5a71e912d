"""The network stack: changes almost never, so it is deployed and updated on its own."""

from __future__ import annotations

from aws_cdk import Stack

from app_config import Settings
from constructs import Construct
from constructs.network.gpu_vpc import GpuVpc, GpuVpcProps
from stacks.common import removal_policy


class NetworkStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self._zones = list(settings.network.availability_zones)
        self.network = GpuVpc(
            self,
            "Network",
            GpuVpcProps(network=settings.network, removal_policy=removal_policy(settings)),
        )

    @property
    def availability_zones(self) -> list[str]:
        """The configured zones. Without this override an account-bound stack would look the
        zones up in AWS at synth time, which needs credentials."""
        return self._zones
