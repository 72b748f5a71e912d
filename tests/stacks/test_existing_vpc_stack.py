"""An existing VPC in the templates: the app references it and creates nothing of it, so `cdk
destroy` cannot change or delete what the app did not create; what the app adds sits in the
subnets the configuration names."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from catalog.vpc_endpoints import INTERFACE_ENDPOINT_SERVICES
from tests.conftest import STACK_ROLES, Synthesized, cfn_text

CONFIGURATION = "existing-vpc"
# The VPC's own resources (CloudFormation resource types of AWS::EC2 that make up or change a
# VPC's network), and aws-cdk-lib's custom resource that rewrites the default security group.
VPC_RESOURCE_TYPES = {
    "AWS::EC2::VPC",
    "AWS::EC2::VPCCidrBlock",
    "AWS::EC2::Subnet",
    "AWS::EC2::SubnetCidrBlock",
    "AWS::EC2::RouteTable",
    "AWS::EC2::Route",
    "AWS::EC2::SubnetRouteTableAssociation",
    "AWS::EC2::NatGateway",
    "AWS::EC2::EIP",
    "AWS::EC2::InternetGateway",
    "AWS::EC2::VPCGatewayAttachment",
    "AWS::EC2::NetworkAcl",
    "AWS::EC2::NetworkAclEntry",
    "AWS::EC2::SubnetNetworkAclAssociation",
    "AWS::EC2::VPCDHCPOptionsAssociation",
    "AWS::EC2::FlowLog",
    "Custom::VpcRestrictDefaultSG",
}


@pytest.fixture(scope="module")
def existing(synthesize: Callable[..., Synthesized]) -> Synthesized:
    return synthesize(CONFIGURATION)


def test_no_stack_creates_or_changes_a_part_of_the_vpc(existing: Synthesized) -> None:
    found = {
        (role, resource["Type"])
        for role in STACK_ROLES
        for resource in existing.templates[role]["Resources"].values()
        if resource["Type"] in VPC_RESOURCE_TYPES
    }
    assert found == set()
    endpoints = existing.in_every_stack("AWS::EC2::VPCEndpoint")
    # A gateway endpoint would write routes into the owner's route tables.
    assert all(e["Properties"].get("VpcEndpointType") == "Interface" for e in endpoints)


def test_what_the_app_adds_is_in_the_vpc_given(existing: Synthesized) -> None:
    vpc_id = existing.settings.network.existing_vpc.vpc_id
    groups = existing.in_every_stack("AWS::EC2::SecurityGroup")
    endpoints = existing.in_every_stack("AWS::EC2::VPCEndpoint")
    assert groups
    assert {g["Properties"]["VpcId"] for g in groups} == {vpc_id}
    assert {e["Properties"]["VpcId"] for e in endpoints} == {vpc_id}


def test_each_part_runs_in_the_subnets_named_for_it(existing: Synthesized) -> None:
    network = existing.settings.network
    vpc = network.existing_vpc
    private = sorted(subnet.subnet_id for subnet in vpc.private_subnets)
    (cluster,) = existing.resources("cluster", "AWS::EKS::Cluster").values()
    assert sorted(cluster["Properties"]["ResourcesVpcConfig"]["SubnetIds"]) == private
    gpu = vpc.gpu_node_subnet(network.gpu_availability_zone).subnet_id
    groups = existing.resources("gpu-nodes", "AWS::EKS::Nodegroup").values()
    assert [g["Properties"]["Subnets"] for g in groups] == [[gpu], [gpu]]
    (load_balancer,) = existing.resources(
        "serving", "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ).values()
    assert sorted(load_balancer["Properties"]["Subnets"]) == sorted(
        subnet.subnet_id for subnet in vpc.load_balancer_subnets
    )
    assert load_balancer["Properties"]["Scheme"] == "internal"
    interface = existing.resources("network", "AWS::EC2::VPCEndpoint").values()
    assert len(interface) == len(INTERFACE_ENDPOINT_SERVICES)
    assert all(sorted(e["Properties"]["SubnetIds"]) == private for e in interface)


def test_the_vpcs_blocks_and_the_load_balancers_ranges_are_what_the_pods_admit(
    existing: Synthesized,
) -> None:
    """Where a created VPC's CIDR was admitted (the endpoints' group, the network policies),
    the existing VPC's blocks are; the Serve port admits the load balancer subnets' ranges."""
    network = existing.settings.network
    groups = existing.resources("network", "AWS::EC2::SecurityGroup").values()
    (endpoint_group,) = groups
    admitted = [rule["CidrIp"] for rule in endpoint_group["Properties"]["SecurityGroupIngress"]]
    assert admitted == network.cidr_blocks()
    texts = list(_strings(existing.templates["serving"]))
    for cidr in [
        *network.cidr_blocks(),
        *(s.cidr_block for s in network.existing_vpc.load_balancer_subnets),
    ]:
        peer = json.dumps({"ipBlock": {"cidr": str(cidr)}}, separators=(",", ":"))
        assert any(peer in text for text in texts), cidr


def _strings(value: object):
    """Every string in a template (manifests are JSON text, some split by Fn::Join)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for each in value.values():
            yield from _strings(each)
    elif isinstance(value, list):
        for each in value:
            yield from _strings(each)


def test_the_cluster_is_deployed_after_the_endpoints_it_may_need(existing: Synthesized) -> None:
    """No reference ties the stacks (the VPC is imported by literal ids), so the order is
    declared: the nodes may reach AWS only through the network stack's endpoints."""
    assert "network" in existing.dependencies("cluster")


def test_with_the_endpoints_there_the_network_stack_adds_nothing(
    synthesize: Callable[..., Synthesized],
) -> None:
    """Only a no-op handle, since CloudFormation takes no template without resources; the
    other stacks are as before."""
    variant = synthesize(CONFIGURATION, {"network.existing_vpc.interface_endpoints_exist": "true"})
    types = [r["Type"] for r in variant.templates["network"]["Resources"].values()]
    assert types == ["AWS::CloudFormation::WaitConditionHandle"]
    services = [
        cfn_text(e["Properties"]["ServiceName"])
        for e in variant.in_every_stack("AWS::EC2::VPCEndpoint")
    ]
    assert services  # the signed API's own execute-api endpoint, in the serving stack
    assert not [s for s in services if s.split(".", 3)[-1] in INTERFACE_ENDPOINT_SERVICES]


def test_an_internet_facing_endpoint_takes_the_load_balancer_subnets_as_public_ones(
    synthesize: Callable[..., Synthesized],
) -> None:
    """The same subnets setting, imported as the VPC's public subnets (preflight checks that
    they route to an internet gateway)."""
    variant = synthesize(
        CONFIGURATION,
        {
            "serving.endpoint.authentication": "none",
            "serving.endpoint.scheme": "internet-facing",
            "serving.endpoint.source_cidrs": '["198.51.100.0/24"]',
            "serving.endpoint.certificate_arn": (
                "arn:aws:acm:us-west-2:123456789012:certificate/"
                "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"
            ),
        },
    )
    (load_balancer,) = variant.resources(
        "serving", "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ).values()
    assert load_balancer["Properties"]["Scheme"] == "internet-facing"
    assert sorted(load_balancer["Properties"]["Subnets"]) == sorted(
        s.subnet_id for s in variant.settings.network.existing_vpc.load_balancer_subnets
    )
