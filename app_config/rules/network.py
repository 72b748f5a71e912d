"""The VPC's zones and address space, against the region and EC2's limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app_config.errors import Problem
from app_config.rules import Rule
from catalog.regions import (
    EKS_UNSUPPORTED_ZONE_IDS,
    example_zones,
    is_zone_id,
    zone_belongs_to_region,
)

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


RULES = (
    Rule("zone", frozenset({"region", "network"}), zone_problems),
    Rule(
        "address-space",
        frozenset({"network"}),
        lambda settings: address_space_problems(settings.network),
    ),
)
