"""A VPC laid out for GPU serving: private nodes, one pinned GPU zone, traffic kept off NAT.

Address arithmetic behind the default /19 private subnets (8,187 usable addresses each): with
the VPC CNI every pod takes a subnet address and each node holds a warm interface's worth beside
those in use (a p5.48xlarge two interfaces of 50: 100 addresses); EFA-only interfaces take none.
The rule `subnet-addresses` (app_config/rules/network.py) counts the GPU zone's subnet at the node
groups' max_size with the CNI's per-type limits (catalog/vpc_cni_limits.py). Two zones of /19 +
/24 + /27 (the internal load balancer's own) use 16,960 of a /16's 65,536 addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2

from app_config.model import ENDPOINT_SUBNET_MASK, Network
from catalog.regions import is_zone_id
from catalog.vpc_endpoints import INTERFACE_ENDPOINT_SERVICES
from constructs import Construct
from constructs.common.checkov_skips import PROVIDER_LAMBDA_SKIPS, resources_of_type, skip_checks
from constructs.common.encrypted_log_group import encrypted_log_group
from constructs.common.log_encryption_key import LogEncryptionKey
from constructs.common.nag_acknowledgments import acknowledge

# The singleton provider aws-cdk-lib adds to the stack for restrict_default_security_group.
DEFAULT_SG_PROVIDER_ID = "Custom::VpcRestrictDefaultSGCustomResourceProvider"


@dataclass(frozen=True)
class GpuVpcProps:
    network: Network
    removal_policy: RemovalPolicy


ENDPOINT_SUBNET_GROUP = "Endpoint"


def endpoint_subnets(vpc: ec2.IVpc, internet_facing: bool) -> list[ec2.ISubnet]:
    """Where the model endpoint's load balancer lives: the public subnets when it faces the
    internet, else subnets of its own."""
    if internet_facing:
        return vpc.select_subnets(subnet_type=ec2.SubnetType.PUBLIC).subnets
    return vpc.select_subnets(subnet_group_name=ENDPOINT_SUBNET_GROUP).subnets


class GpuVpc(Construct):
    """VPC, endpoints and encrypted flow logs. Publishes ``vpc`` and ``gpu_subnets``."""

    def __init__(self, scope: Construct, construct_id: str, props: GpuVpcProps) -> None:
        super().__init__(scope, construct_id)
        network = props.network
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(str(network.vpc_cidr)),
            availability_zones=network.availability_zones,
            nat_gateways=network.nat_gateways,
            restrict_default_security_group=True,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="Public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=network.public_subnet_mask,
                    map_public_ip_on_launch=False,
                ),
                ec2.SubnetConfiguration(
                    name="Private",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=network.private_subnet_mask,
                ),
                # Last, so existing subnets keep their ranges: the internal endpoint's load
                # balancer alone, so that the pods can admit exactly its addresses.
                ec2.SubnetConfiguration(
                    name=ENDPOINT_SUBNET_GROUP,
                    subnet_type=ec2.SubnetType.PRIVATE_ISOLATED,
                    cidr_mask=ENDPOINT_SUBNET_MASK,
                ),
            ],
        )
        _skip_default_sg_provider_checks(self)
        if is_zone_id(network.gpu_availability_zone):
            self._place_subnets_by_zone_id()
        else:
            self._accept_pinned_zone_names()
        self._tag_subnets_for_load_balancers()

        self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        add_interface_endpoints(self, self.vpc, network.cidr_blocks())

        self.flow_log_key = LogEncryptionKey(
            self,
            "FlowLogKey",
            description="Encrypts the VPC flow log group",
            removal_policy=props.removal_policy,
        ).key
        self.flow_log_group = encrypted_log_group(
            self,
            "FlowLogs",
            key=self.flow_log_key,
            retention_days=network.flow_log_retention_days,
            removal_policy=props.removal_policy,
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )

        self.gpu_subnets = ec2.SubnetSelection(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
            availability_zones=[network.gpu_availability_zone],
        )

    def _place_subnets_by_zone_id(self) -> None:
        """Zones given as AZ IDs stay IDs in the template (AvailabilityZoneId), so the same
        physical zone is used in every account; the L2 VPC only knows AZ names."""
        for subnet in self._all_subnets():
            cfn_subnet = subnet.node.default_child
            cfn_subnet.add_property_deletion_override("AvailabilityZone")
            cfn_subnet.add_property_override("AvailabilityZoneId", subnet.availability_zone)

    def _accept_pinned_zone_names(self) -> None:
        """cfn-lint W3010 warns on hard-coded AZ names; pinning is the point here, so the warning
        is silenced on these subnets only."""
        reason = (
            "Zones are pinned on purpose: the GPU zone must be where the P-instance capacity is."
        )
        for subnet in self._all_subnets():
            subnet.node.default_child.add_metadata(
                "cfn-lint", {"config": {"ignore_checks": ["W3010"]}}
            )
            # The same check, run by aws-cdk-lib's built-in CloudFormation validation at synth.
            acknowledge(subnet, "CloudFormation-Validate::W3010", reason)

    def _all_subnets(self) -> list[ec2.ISubnet]:
        return self.vpc.public_subnets + self.vpc.private_subnets + self.vpc.isolated_subnets

    def _tag_subnets_for_load_balancers(self) -> None:
        """Subnet discovery tags of the AWS Load Balancer Controller (its docs, "Subnet
        auto-discovery")."""
        for subnet in self.vpc.public_subnets:
            subnet.node.default_child.tags.set_tag("kubernetes.io/role/elb", "1")
        for subnet in self.vpc.private_subnets:
            subnet.node.default_child.tags.set_tag("kubernetes.io/role/internal-elb", "1")


def add_interface_endpoints(scope: Construct, vpc: ec2.IVpc, cidr_blocks: list[str]) -> None:
    """The interface endpoints the nodes and pods call (catalog/vpc_endpoints.py) in the private
    subnets, behind a security group of their own that admits HTTPS from the VPC's ranges."""
    endpoint_security_group = ec2.SecurityGroup(
        scope,
        "EndpointSecurityGroup",
        vpc=vpc,
        description="HTTPS from inside the VPC to the interface endpoints",
        allow_all_outbound=False,
    )
    # The CIDRs as literals, not the VPC's CidrBlock attribute: cdk-nag's EC23 cannot resolve
    # an attribute and would report an error instead of a result.
    for cidr in cidr_blocks:
        endpoint_security_group.add_ingress_rule(
            ec2.Peer.ipv4(cidr), ec2.Port.HTTPS, "HTTPS from the VPC"
        )
    private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
    for service in INTERFACE_ENDPOINT_SERVICES:  # why each: catalog/vpc_endpoints.py
        vpc.add_interface_endpoint(
            _endpoint_id(service),
            service=ec2.InterfaceVpcEndpointAwsService(service),
            subnets=private,
            security_groups=[endpoint_security_group],
            open=False,
        )


def _skip_default_sg_provider_checks(scope: Construct) -> None:
    provider = Stack.of(scope).node.try_find_child(DEFAULT_SG_PROVIDER_ID)
    for function in resources_of_type(provider, "AWS::Lambda::Function"):
        skip_checks(
            function,
            {
                **PROVIDER_LAMBDA_SKIPS,
                "CKV_AWS_117": "Removes the default security group's rules through the EC2 API "
                "while "
                "the VPC is being created, before any endpoint or NAT path in it exists.",
            },
        )


def _endpoint_id(service: str) -> str:
    """ecr.api -> EcrApi, eks-auth -> EksAuth."""
    return "".join(part.capitalize() for part in service.replace("-", ".").split("."))
