"""`pdctl preflight` for an existing VPC (network.existing_vpc): what synth takes on trust.

Synth imports the VPC from the ids, zones and route tables in the configuration and checks only
their shape (app_config/rules/existing_vpc.py); these checks ask EC2 whether they are true, and
whether the VPC can hold what the app puts there. Read-only: Describe* calls only.

Sources: EKS user guide, "View Amazon EKS networking requirements for VPC and subnets" (the VPC
needs DNS hostnames and DNS resolution, or nodes cannot register; every pod takes an address of
its node's subnet with the VPC CNI) and "Deploy private clusters with limited internet access"
(without a way out, nodes reach AWS only through interface endpoints and the S3 gateway
endpoint, and nothing on the internet); VPC user guide, "Subnets" (a subnet whose route table
routes to an internet gateway is public; a subnet without an explicit association uses the
main route table) and "Control traffic to subnets using route tables"; PrivateLink guide,
"Manage DNS names for VPC endpoint services" (one private hosted zone per service name and VPC:
a second interface endpoint with private DNS for the same service fails to create); ELB user
guide, "Subnets for your Network Load Balancer" (8 free addresses per subnet).
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Any

from botocore.exceptions import ClientError

from app_config import Settings
from app_config.model import ExistingVpc
from app_config.rules.network import gpu_subnet_addresses
from catalog.vpc_endpoints import INTERFACE_ENDPOINT_SERVICES
from pdctl.checks import Check, failed, passed

# ELB user guide, "Subnets for your Network Load Balancer".
LOAD_BALANCER_FREE_ADDRESSES = 8
ANYWHERE = "0.0.0.0/0"
# Route targets (EC2 API reference, Route) that carry the default route out of a private subnet:
# a NAT gateway, a transit gateway (to a central egress VPC), a NAT instance or a firewall's
# interface, a Gateway Load Balancer endpoint (GatewayId vpce-...), a peering connection.
EGRESS_TARGETS = (
    "NatGatewayId",
    "TransitGatewayId",
    "NetworkInterfaceId",
    "InstanceId",
    "VpcPeeringConnectionId",
)


def _existing(settings: Settings) -> ExistingVpc:
    existing = settings.network.existing_vpc
    assert existing is not None  # run_preflight asks only with one
    return existing


def vpc_settings(ec2: Any, settings: Settings) -> Check:
    """The VPC exists, holds the CIDR blocks given, and resolves DNS for the endpoints' private
    names and the nodes' registration."""
    existing = _existing(settings)
    name = f"existing VPC {existing.vpc_id}"
    try:
        (vpc,) = ec2.describe_vpcs(VpcIds=[existing.vpc_id])["Vpcs"]
    except ClientError as error:
        return _refused(name, error, "set network.existing_vpc.vpc_id to your VPC's id")
    associated = {
        block["CidrBlock"]
        for block in vpc["CidrBlockAssociationSet"]
        if block["CidrBlockState"]["State"] == "associated"
    }
    problems = [
        f"{block} is not one of its CIDR blocks ({', '.join(sorted(associated))})"
        for block in settings.network.cidr_blocks()
        if block not in associated
    ]
    for attribute, key in (
        ("enableDnsSupport", "EnableDnsSupport"),
        ("enableDnsHostnames", "EnableDnsHostnames"),
    ):
        answer = ec2.describe_vpc_attribute(VpcId=existing.vpc_id, Attribute=attribute)
        if answer[key]["Value"] is not True:
            problems.append(f"{attribute} is off")
    if not problems:
        return passed(name, f"blocks {', '.join(settings.network.cidr_blocks())}, DNS on")
    return failed(
        name,
        "; ".join(problems),
        "list the VPC's blocks in network.existing_vpc.cidr_blocks (aws ec2 describe-vpcs); "
        "turn DNS on with `aws ec2 modify-vpc-attribute --enable-dns-support` and "
        "`--enable-dns-hostnames` (EKS nodes cannot register without them)",
    )


def subnet_checks(ec2: Any, settings: Settings) -> list[Check]:
    """The subnets exist in that VPC and the zones said, inside its blocks, the load balancer's
    with the ranges given; and they have room: the GPU subnet for the nodes' and pods' addresses
    at max_size (the rule subnet-addresses' count), each load balancer subnet for an NLB."""
    existing = _existing(settings)
    name = "existing subnets"
    given = existing.subnets()
    ids = list(dict.fromkeys(subnet.subnet_id for subnet in given.values()))
    try:
        answer = ec2.describe_subnets(SubnetIds=ids)["Subnets"]
    except ClientError as error:
        return [_refused(name, error, "set each subnet_id to a subnet of your VPC")]
    found = {subnet["SubnetId"]: subnet for subnet in answer}
    blocks = [IPv4Network(block) for block in settings.network.cidr_blocks()]
    problems = []
    for where, subnet in given.items():
        real = found.get(subnet.subnet_id)
        if real is None:
            problems.append(f"{where} {subnet.subnet_id} does not exist")
            continue
        zones = {real["AvailabilityZone"], real["AvailabilityZoneId"]}
        cidr = IPv4Network(real["CidrBlock"])
        if real["VpcId"] != existing.vpc_id:
            problems.append(f"{where} {subnet.subnet_id} is in {real['VpcId']}")
        if subnet.availability_zone not in zones:
            problems.append(
                f"{where} {subnet.subnet_id} is in {' / '.join(sorted(zones))}, not "
                f"{subnet.availability_zone}"
            )
        if not any(cidr.subnet_of(block) for block in blocks):
            problems.append(f"{where} {subnet.subnet_id} ({cidr}) is in none of cidr_blocks")
        if getattr(subnet, "cidr_block", cidr) != cidr:
            problems.append(f"{where} {subnet.subnet_id} is {cidr}, not {subnet.cidr_block}")
    if problems:
        return [
            failed(
                name,
                "; ".join(problems),
                "correct network.existing_vpc from `aws ec2 describe-subnets --filters "
                f"Name=vpc-id,Values={existing.vpc_id}` (SubnetId, AvailabilityZoneId, "
                "CidrBlock)",
            )
        ]
    return [
        passed(name, f"{len(ids)} subnets in {existing.vpc_id}, zones and ranges as given"),
        _room(settings, existing, found),
    ]


def _room(settings: Settings, existing: ExistingVpc, found: dict[str, Any]) -> Check:
    name = "existing subnets: free addresses"
    gpu = existing.gpu_node_subnet(settings.network.gpu_availability_zone)
    needed = gpu_subnet_addresses(settings)
    if gpu.subnet_id not in {subnet.subnet_id for subnet in existing.private_subnets}:
        # A subnet of the GPU nodes alone: the system nodes and endpoints are elsewhere.
        needed = {what: count for what, count in needed.items() if what.startswith("gpu_nodes")}
    free = found[gpu.subnet_id]["AvailableIpAddressCount"]
    total = sum(needed.values())
    problems = []
    if free < total:
        shares = ", ".join(f"{what} {count}" for what, count in needed.items())
        problems.append(
            f"the GPU subnet {gpu.subnet_id} has {free} free addresses and may need {total} at "
            f"the node groups' max_size ({shares})"
        )
    for subnet in existing.load_balancer_subnets:
        left = found[subnet.subnet_id]["AvailableIpAddressCount"]
        if left < LOAD_BALANCER_FREE_ADDRESSES:
            problems.append(
                f"load balancer subnet {subnet.subnet_id} has {left} free addresses; an NLB "
                f"needs {LOAD_BALANCER_FREE_ADDRESSES}"
            )
    if not problems:
        return passed(name, f"GPU subnet {free} free for {total} needed at max_size")
    return failed(
        name,
        "; ".join(problems),
        "give a larger gpu_subnet (a subnet of its own in the GPU zone), lower the GPU groups' "
        "max_size, or free addresses in the subnets named",
    )


def route_checks(ec2: Any, settings: Settings) -> Check:
    """Each subnet's route table is the one given; the private and GPU subnets route to no
    internet gateway and have a way out (a NAT, a transit gateway...) or, for a GPU subnet of
    its own with the model in S3, the S3 gateway endpoint beside the interface endpoints (the
    private subnets hold the kubectl provider, which fetches Helm charts); an internal
    endpoint's load balancer subnets are private too, an internet-facing one's public."""
    existing = _existing(settings)
    name = "existing subnets: routes"
    try:
        pages = ec2.get_paginator("describe_route_tables").paginate(
            Filters=[{"Name": "vpc-id", "Values": [existing.vpc_id]}]
        )
        tables = [table for page in pages for table in page["RouteTables"]]
    except ClientError as error:
        return _refused(name, error, "allow ec2:DescribeRouteTables")
    explicit = {
        association["SubnetId"]: table
        for table in tables
        for association in table.get("Associations", [])
        if association.get("SubnetId")
    }
    main = next((t for t in tables if any(a.get("Main") for a in t.get("Associations", []))), None)
    public_endpoint = settings.serving.endpoint.load_balancer_internet_facing
    problems = []
    for where, subnet in existing.subnets().items():
        table = explicit.get(subnet.subnet_id, main)
        if table is None:
            problems.append(f"{where} {subnet.subnet_id} has no route table")
            continue
        if table["RouteTableId"] != subnet.route_table_id:
            problems.append(
                f"{where} {subnet.subnet_id} uses {table['RouteTableId']}, not "
                f"{subnet.route_table_id}"
            )
        routes = [route for route in table["Routes"] if route.get("State") != "blackhole"]
        public = any(route.get("GatewayId", "").startswith("igw-") for route in routes)
        if where.startswith("load_balancer_subnets"):
            if public != public_endpoint:
                kind = "public" if public else "private"
                wanted = "public" if public_endpoint else "private"
                problems.append(
                    f"{where} {subnet.subnet_id} is {kind}; the endpoint's scheme needs {wanted}"
                )
            continue
        if public:
            problems.append(
                f"{where} {subnet.subnet_id} routes to an internet gateway (a public subnet)"
            )
        elif not _has_egress(routes) and not (
            where == "gpu_subnet" and _nodes_need_only_endpoints(settings, routes)
        ):
            problems.append(f"{where} {subnet.subnet_id} has no way out ({_missing(where)})")
    if not problems:
        return passed(name, "private subnets without internet gateway routes, each with a way out")
    return failed(
        name,
        "; ".join(problems),
        "name each subnet's own route table; give private subnets (no igw- route) with a "
        "default route through a NAT or transit gateway (aws ec2 describe-route-tables)",
    )


def _has_egress(routes: list[dict[str, Any]]) -> bool:
    for route in routes:
        if route.get("DestinationCidrBlock") != ANYWHERE:
            continue
        if any(route.get(target) for target in EGRESS_TARGETS):
            return True
        if route.get("GatewayId", "").startswith("vpce-"):  # a Gateway Load Balancer endpoint
            return True
    return False


def _nodes_need_only_endpoints(settings: Settings, routes: list[dict[str, Any]]) -> bool:
    """The GPU nodes without a way out: images from ECR (layers from S3) and the model from S3
    work through the endpoints; Hugging Face does not."""
    s3_gateway = any(
        route.get("DestinationPrefixListId") and route.get("GatewayId", "").startswith("vpce-")
        for route in routes
    )
    return s3_gateway and settings.serving.model.s3_uri is not None


def _missing(where: str) -> str:
    if where == "gpu_subnet":
        return (
            "no default route through a NAT or transit gateway, and not both the model in S3 "
            "(serving.model.s3_uri) and an S3 gateway endpoint route for the image layers"
        )
    return (
        "no default route through a NAT or transit gateway: the kubectl provider pulls the Helm "
        "charts from their HTTPS repositories (catalog/helm_charts.py)"
    )


def endpoint_checks(ec2: Any, settings: Settings) -> Check:
    """interface_endpoints_exist true: each endpoint the nodes need is there, available, with
    private DNS. false: none of them is, since the app's would clash with its private DNS."""
    existing = _existing(settings)
    name = "interface endpoints"
    try:
        pages = ec2.get_paginator("describe_vpc_endpoints").paginate(
            Filters=[
                {"Name": "vpc-id", "Values": [existing.vpc_id]},
                {"Name": "vpc-endpoint-type", "Values": ["Interface"]},
            ]
        )
        endpoints = [endpoint for page in pages for endpoint in page["VpcEndpoints"]]
    except ClientError as error:
        return _refused(name, error, "allow ec2:DescribeVpcEndpoints")
    prefix = f"com.amazonaws.{settings.region}."
    usable = {
        endpoint["ServiceName"].removeprefix(prefix)
        for endpoint in endpoints
        if endpoint["State"].lower() == "available" and endpoint["PrivateDnsEnabled"]
    }
    needed = list(INTERFACE_ENDPOINT_SERVICES)
    if existing.interface_endpoints_exist:
        missing = [service for service in needed if service not in usable]
        if not missing:
            return passed(name, f"all {len(needed)} there, with private DNS")
        return failed(
            name,
            f"missing (or without private DNS, or not available): {', '.join(missing)}",
            "create them in the private subnets with private DNS, or set "
            "network.existing_vpc.interface_endpoints_exist false to let the app create all "
            f"{len(needed)} (then none may exist)",
        )
    clash = [service for service in needed if service in usable]
    if not clash:
        return passed(name, f"none of the {len(needed)} exists; the app creates them")
    return failed(
        name,
        f"already in the VPC with private DNS: {', '.join(clash)}; the app's endpoints for the "
        "same services would fail to create (one private DNS name per service and VPC)",
        "set network.existing_vpc.interface_endpoints_exist true when the VPC has all of "
        f"{', '.join(needed)}; else create the missing ones and set it true",
    )


def existing_vpc_checks(ec2: Any, settings: Settings) -> list[tuple[str, Any]]:
    """The planned checks, (name, call), in the order an operator fixes them."""
    return [
        ("existing VPC", lambda: vpc_settings(ec2, settings)),
        ("existing subnets", lambda: subnet_checks(ec2, settings)),
        ("existing subnets: routes", lambda: route_checks(ec2, settings)),
        ("interface endpoints", lambda: endpoint_checks(ec2, settings)),
    ]


def _refused(name: str, error: ClientError, fix: str) -> Check:
    from pdctl.preflight import _refused as refused

    return refused(name, error, fix)
