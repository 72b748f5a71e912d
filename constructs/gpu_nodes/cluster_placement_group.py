"""The cluster placement group the on-demand GPU node groups share.

One group for both sides: prefill and decode exchange the KV cache, so they belong on the same
low-latency network spine (EC2 user guide, "Placement strategies"). A capacity reservation
replaces the group: adding a reserved instance to a group the reservation was not made in fails.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2

from constructs import Construct


class ClusterPlacementGroup(Construct):
    """Publishes ``name``."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.resource = ec2.CfnPlacementGroup(self, "Resource", strategy="cluster")
        self.name = self.resource.ref
