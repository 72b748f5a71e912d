"""An existing VPC (network.existing_vpc), imported from its attributes, with only what the app
needs added to it.

Imported with ``ec2.Vpc.from_vpc_attributes`` and literal ids, zones and route tables from the
configuration, not with ``ec2.Vpc.from_lookup``: a lookup needs AWS credentials and an account
at synth time (and caches its answer in cdk.context.json), which would end synth without an
account, the tests and every CI run that has none. What a lookup would have told is checked by
`pdctl preflight` instead (pdctl/existing_vpc.py).

An imported VPC is a reference: the templates hold no AWS::EC2::VPC, Subnet, RouteTable, route,
NAT or internet gateway of it, so `cdk destroy` cannot change or delete them. What the app adds
is its own and goes with it: the interface endpoints and their security group (here, unless
interface_endpoints_exist), and the security groups the other stacks create in the VPC. Not
added, since each would change what the VPC's owner runs: the S3 gateway endpoint (it writes
routes into the owner's route tables), flow logs (the owner's choice and cost), the default
security group's lockdown (a custom resource that rewrites the owner's group) and the load
balancer controller's subnet tags (the app's load balancer is its own NLB, bound by
TargetGroupBinding, so nothing discovers subnets by tag).
"""

from __future__ import annotations

from typing import TypeVar

from aws_cdk import CfnWaitConditionHandle
from aws_cdk import aws_ec2 as ec2

from app_config.model import ExistingSubnet, Network
from constructs import Construct
from constructs.network.gpu_vpc import ENDPOINT_SUBNET_GROUP, add_interface_endpoints

PRIVATE_SUBNET_GROUP = "Private"
PUBLIC_SUBNET_GROUP = "Public"
S = TypeVar("S", bound=ExistingSubnet)


class ExistingGpuVpc(Construct):
    """Publishes ``vpc`` and ``gpu_subnets``, as GpuVpc does, so that nothing downstream knows
    whose VPC it is."""

    def __init__(
        self, scope: Construct, construct_id: str, *, network: Network, internet_facing: bool
    ) -> None:
        super().__init__(scope, construct_id)
        existing = network.existing_vpc
        assert existing is not None  # the stack builds this construct only with one
        zones = list(network.availability_zones)
        # Vpc.fromVpcAttributes gives the i-th subnet of a group the i-th zone: in zone order.
        private = _in_zone_order(existing.private_subnets, zones)
        load_balancer = _in_zone_order(existing.load_balancer_subnets, zones)
        # The internal endpoint's subnets are a group of their own, as in the VPC the app
        # creates; an internet-facing endpoint's are the public subnets.
        endpoint_group = "public" if internet_facing else "isolated"
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=existing.vpc_id,
            availability_zones=zones,
            vpc_cidr_block=str(existing.cidr_blocks[0]),
            private_subnet_ids=[subnet.subnet_id for subnet in private],
            private_subnet_names=[PRIVATE_SUBNET_GROUP],
            private_subnet_route_table_ids=[subnet.route_table_id for subnet in private],
            **{
                f"{endpoint_group}_subnet_ids": [subnet.subnet_id for subnet in load_balancer],
                f"{endpoint_group}_subnet_names": [
                    PUBLIC_SUBNET_GROUP if internet_facing else ENDPOINT_SUBNET_GROUP
                ],
                f"{endpoint_group}_subnet_route_table_ids": [
                    subnet.route_table_id for subnet in load_balancer
                ],
                f"{endpoint_group}_subnet_ipv4_cidr_blocks": [
                    str(subnet.cidr_block) for subnet in load_balancer
                ],
            },
        )
        if not existing.interface_endpoints_exist:
            add_interface_endpoints(self, self.vpc, network.cidr_blocks())
        else:
            # Nothing else to add, and CloudFormation takes no template without resources (the
            # CDK's synth-time validation refuses one). The stack stays, holding a no-op
            # handle, so that turning interface_endpoints_exist on later deletes the app's
            # endpoints in an update of this stack instead of leaving an orphaned stack behind.
            CfnWaitConditionHandle(self, "NothingToAdd")
        gpu = existing.gpu_node_subnet(network.gpu_availability_zone)
        if existing.gpu_subnet is None or gpu.subnet_id in {s.subnet_id for s in private}:
            self.gpu_subnets = ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                availability_zones=[network.gpu_availability_zone],
            )
        else:
            self.gpu_subnets = ec2.SubnetSelection(
                subnets=[
                    ec2.Subnet.from_subnet_attributes(
                        self,
                        "GpuSubnet",
                        subnet_id=gpu.subnet_id,
                        availability_zone=gpu.availability_zone,
                        route_table_id=gpu.route_table_id,
                    )
                ]
            )


def _in_zone_order(subnets: list[S], zones: list[str]) -> list[S]:
    by_zone = {subnet.availability_zone: subnet for subnet in subnets}
    return [by_zone[zone] for zone in zones]
