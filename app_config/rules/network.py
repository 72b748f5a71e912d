"""The VPC's zones and address space, against the region and EC2's limits.

Sources: VPC user guide, "VPC CIDR blocks" (a VPC's IPv4 block is /16 to /28; RFC 1918 ranges
are recommended, a publicly routable block is allowed; "Some AWS services use the 172.17.0.0/16
CIDR range. To avoid future conflicts, don't use this range when creating your VPC") and "Subnet
CIDR blocks" (AWS reserves the first four and the last address of every subnet); EKS user guide,
"View Amazon EKS networking requirements for VPC and subnets" (with the VPC CNI every pod takes
an address of its node's subnet) and CreateCluster's kubernetesNetworkConfig (with no service
CIDR given, as here, EKS picks 10.100.0.0/16 or 172.20.0.0/16, whichever the VPC does not
overlap, so the Service range never collides with the VPC's).
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network
from math import ceil
from typing import TYPE_CHECKING

from app_config.errors import Finding, Problem
from app_config.rules import WARNING, Rule
from catalog.efa_layout import EFA, efa_interface_layout
from catalog.instances import CATALOG
from catalog.regions import (
    EKS_UNSUPPORTED_ZONE_IDS,
    example_zones,
    is_zone_id,
    zone_belongs_to_region,
)
from catalog.vpc_cni_limits import addresses_held, cni_limits
from catalog.vpc_endpoints import INTERFACE_ENDPOINT_SERVICES

if TYPE_CHECKING:
    from app_config.model import Network, Settings


def zone_problems(settings: Settings) -> list[Problem]:
    network, region = settings.network, settings.region
    problems = []
    for index, zone in enumerate(network.availability_zones):
        if not zone_belongs_to_region(zone, region):
            problems.append(
                Problem(
                    f"network.availability_zones[{index}]",
                    f"not a zone of {region}; use {example_zones(region)}, or leave "
                    "network.availability_zones out to use the region's first two zones",
                    zone,
                )
            )
        elif zone in EKS_UNSUPPORTED_ZONE_IDS:
            problems.append(
                Problem(
                    f"network.availability_zones[{index}]",
                    "EKS does not place control planes in "
                    "this zone (UnsupportedAvailabilityZoneException); pick another",
                    zone,
                )
            )
    zones = network.availability_zones
    if len(set(zones)) != len(zones):
        problems.append(Problem("network.availability_zones", "zones must be distinct", zones))
    if len({is_zone_id(zone) for zone in zones}) > 1:
        problems.append(
            Problem(
                "network.availability_zones",
                "mixes AZ names and AZ IDs; use one kind",
                zones,
            )
        )
    if network.gpu_availability_zone not in zones:
        problems.append(
            Problem(
                "network.gpu_availability_zone",
                f"must be one of network.availability_zones {zones}",
                network.gpu_availability_zone,
            )
        )
    if network.nat_gateways > len(zones):
        problems.append(
            Problem(
                "network.nat_gateways",
                f"at most one per zone ({len(zones)} zones)",
                network.nat_gateways,
            )
        )
    return problems


def address_space_problems(network: Network) -> list[Problem]:
    if network.existing_vpc is not None:  # its subnets exist; preflight counts their room
        return []
    available = network.vpc_cidr.num_addresses
    needed = network.required_addresses()
    if needed <= available:
        return []
    return [
        Problem(
            "network.vpc_cidr",
            f"too small: {len(network.availability_zones)} zones x (/{network.private_subnet_mask} "
            f"private + /{network.public_subnet_mask} public) need {needed} addresses, the VPC has "
            f"{available}; use a larger VPC CIDR or smaller subnets",
            str(network.vpc_cidr),
        )
    ]


# Private address space: RFC 1918 and RFC 6598's shared space (100.64.0.0/10), which EKS
# documents for VPC and pod ranges (EKS user guide, "Deploy pods in alternate subnets with
# custom networking").
PRIVATE_RANGES = tuple(
    IPv4Network(block)
    for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
)
DOCKER_BRIDGE = IPv4Network("172.17.0.0/16")


def vpc_cidr_range(settings: Settings) -> Iterator[Finding]:
    """Ranges EC2 accepts but that cost something: public addresses inside the VPC shadow the
    same addresses on the internet, and 172.17.0.0/16 is Docker's bridge, which AWS asks VPCs
    to leave free."""
    if settings.network.existing_vpc is not None:  # not the app's choice to weigh
        return
    cidr = settings.network.vpc_cidr
    if not any(cidr.subnet_of(block) for block in PRIVATE_RANGES):
        yield Finding(
            "network.vpc_cidr",
            "is not a private range (RFC 1918 10/8, 172.16/12, 192.168/16, or 100.64/10): EC2 "
            "accepts a publicly routable VPC block, but the nodes can then no longer reach the "
            "internet hosts with those addresses (model downloads, image pulls without an "
            "endpoint), and none of it is reachable from outside (VPC user guide, 'VPC CIDR "
            "blocks'); use e.g. 10.0.0.0/16",
            str(cidr),
        )
    elif cidr.overlaps(DOCKER_BRIDGE):
        yield Finding(
            "network.vpc_cidr",
            f"overlaps {DOCKER_BRIDGE}, which AWS asks VPCs to avoid: Docker's default bridge, "
            "used by SageMaker and Cloud9 environments and by any tool that runs Docker on a "
            "node or a peered machine, whose traffic to the VPC would then stay local (VPC user "
            "guide, 'VPC CIDR blocks'); use another range such as 10.0.0.0/16",
            str(cidr),
        )


# AWS reserves five addresses of every subnet (VPC user guide, "Subnet CIDR blocks").
SUBNET_RESERVED_ADDRESSES = 5
# Pods with an address of their own on one GPU node: its Ray worker and the DaemonSets that are
# not on the host network (device plugins, the CloudWatch agent and Fluent Bit, the node
# monitoring agent, an efa-check or bench pod): fewer than one interface's secondary addresses
# of any catalog type (29 at the least), so the CNI holds the primary interface and a warm one.
GPU_NODE_PODS = 12
# What else takes addresses in the GPU zone's private subnet: EKS's control plane interfaces
# (EKS user guide, "Amazon EKS networking requirements": up to four per subnet given), the
# Prometheus scraper's interface and the Ray GCS store's nodes (at most 1 + 5 replicas).
OTHER_ADDRESSES = 4 + 1 + 6


def gpu_node_addresses(instance_type: str) -> int:
    """Addresses one GPU node takes: what the VPC CNI holds, plus one for each interface of the
    EFA layout beyond the primary that carries an IP (EFA with ENA; EFA-only takes none)."""
    layout = efa_interface_layout(CATALOG[instance_type])
    interface_addresses = sum(1 for slot in layout[1:] if slot.interface_type == EFA)
    return addresses_held(instance_type, GPU_NODE_PODS) + interface_addresses


def gpu_subnet_addresses(settings: Settings) -> dict[str, int]:
    """What the GPU zone's private subnet must hold, by what takes it."""
    zones = len(settings.network.availability_zones)
    system = settings.cluster.system_nodes
    limits = cni_limits(system.instance_type)
    needed = {
        f"gpu_nodes.{role}": group.scaling.max_size * gpu_node_addresses(group.instance_type)
        for role, group in settings.gpu_nodes.groups().items()
    }
    # The system node group spreads its nodes over every zone (Auto Scaling balances them); a
    # system node can take every address of its default card's interfaces.
    needed["cluster.system_nodes"] = (
        ceil(system.scaling.max_size / zones) * limits.interfaces * limits.addresses_per_interface
    )
    needed["network endpoints and services"] = len(INTERFACE_ENDPOINT_SERVICES) + OTHER_ADDRESSES
    return needed


def subnet_addresses(settings: Settings) -> Iterator[Finding]:
    """The GPU zone's subnet of a VPC the app creates; an existing VPC's subnets are counted by
    `pdctl preflight` against their free addresses (pdctl/existing_vpc.py), with the same
    gpu_subnet_addresses."""
    if settings.network.existing_vpc is not None:
        return
    mask = settings.network.private_subnet_mask
    usable = 2 ** (32 - mask) - SUBNET_RESERVED_ADDRESSES
    needed = gpu_subnet_addresses(settings)
    total = sum(needed.values())
    if total <= usable:
        return
    shares = ", ".join(f"{what} {count}" for what, count in needed.items())
    fitting = [m for m in range(28, 15, -1) if 2 ** (32 - m) - SUBNET_RESERVED_ADDRESSES >= total]
    fix = (
        f"Use private_subnet_mask {fitting[0]} or less (with a VPC CIDR that holds them)"
        if fitting
        else "No subnet of a VPC holds that many"
    )
    yield Finding(
        "network.private_subnet_mask",
        f"/{mask} private subnets have {usable} usable addresses (AWS reserves 5), but the GPU "
        f"zone's may need {total} at the node groups' max_size ({shares}): with the VPC CNI "
        "every pod takes a subnet address and each node holds a warm interface's worth "
        "(catalog/vpc_cni_limits.py); when the subnet runs out, new nodes cannot launch and new "
        f"pods get no address. {fix}, or lower max_size",
        mask,
    )


RULES = (
    Rule("zone", frozenset({"region", "network"}), zone_problems),
    Rule(
        "address-space",
        frozenset({"network"}),
        lambda settings: address_space_problems(settings.network),
    ),
    Rule("vpc-cidr-range", frozenset({"network"}), vpc_cidr_range, WARNING, stack="network"),
    Rule(
        "subnet-addresses",
        frozenset({"network", "cluster", "gpu_nodes"}),
        subnet_addresses,
        WARNING,
        stack="network",
    ),
)
