"""An existing VPC (network.existing_vpc): what synth can check without an AWS account.

Synth imports the VPC from the attributes given (no lookup, no credentials), so nothing here
asks AWS; `pdctl preflight` checks the rest against the account (the subnets exist, are in
that VPC and those zones, are private, have room and a way out; pdctl/existing_vpc.py).

Sources: EC2 user guide, "Resource IDs" (an id is the resource type's prefix, a hyphen and 8
hexadecimal characters, or 17 for the longer ids every account has used since 2018); VPC user
guide, "VPC CIDR blocks" (a VPC's IPv4 blocks do not overlap; a subnet lies inside one block) and
"Subnets" (a subnet lies in one Availability Zone); aws-cdk-lib 2.275 `Vpc.fromVpcAttributes`
(subnet ids of a group must be a multiple of the zones given, one per zone in the zones' order).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.rules import Rule

if TYPE_CHECKING:
    from app_config.model import ExistingVpc, Settings

# The prefixes of the ids a configuration names (EC2 API reference: Vpc, Subnet, RouteTable).
_ID_FORMATS = {prefix: re.compile(rf"{prefix}-[0-9a-f]{{8}}(?:[0-9a-f]{{9}})?") for prefix in (
    "vpc", "subnet", "rtb"
)}  # fmt: skip
_EXAMPLE_HEX = "0123456789abcdef0"
PATH = "network.existing_vpc"


def ec2_id_problem(value: str, prefix: str) -> str:
    """What is wrong with an EC2 id, or '' when it has the format."""
    if _ID_FORMATS[prefix].fullmatch(value):
        return ""
    return (
        f"not a {prefix} id: EC2 ids are '{prefix}-' and 8 or 17 lower-case hexadecimal "
        f"characters (EC2 user guide, 'Resource IDs'), e.g. {prefix}-{_EXAMPLE_HEX}"
    )


def id_formats(settings: Settings) -> Iterator[Finding]:
    existing = settings.network.existing_vpc
    if existing is None:
        return
    named = [("vpc_id", existing.vpc_id, "vpc")]
    for where, subnet in existing.subnets().items():
        named.append((f"{where}.subnet_id", subnet.subnet_id, "subnet"))
        named.append((f"{where}.route_table_id", subnet.route_table_id, "rtb"))
    for where, value, prefix in named:
        problem = ec2_id_problem(value, prefix)
        if problem:
            yield Finding(f"{PATH}.{where}", problem, value)


def created_only_settings(settings: Settings) -> Iterator[Finding]:
    """Settings that shape a VPC the app creates: given beside an existing VPC they would do
    nothing, and a reader would believe they do."""
    from app_config.model import CREATED_VPC_SETTINGS

    network = settings.network
    if network.existing_vpc is None:
        return
    for name in CREATED_VPC_SETTINGS:
        if name in network.model_fields_set:
            yield Finding(
                f"network.{name}",
                "shapes a VPC the app creates; with network.existing_vpc the VPC is yours and "
                "this setting would change nothing: remove it (the VPC's ranges are "
                "network.existing_vpc.cidr_blocks)",
                getattr(network, name) if name != "vpc_cidr" else str(network.vpc_cidr),
            )


def zones(settings: Settings) -> Iterator[Finding]:
    """One private subnet and one load balancer subnet per zone of availability_zones (what
    Vpc.fromVpcAttributes takes, and what the EKS control plane and an NLB across zones need),
    the GPU subnet in the GPU zone."""
    network = settings.network
    existing = network.existing_vpc
    if existing is None:
        return
    wanted = list(network.availability_zones)
    for group in ("private_subnets", "load_balancer_subnets"):
        subnets = getattr(existing, group)
        given = [subnet.availability_zone for subnet in subnets]
        twice = sorted(zone for zone, count in Counter(given).items() if count > 1)
        if twice:
            yield Finding(
                f"{PATH}.{group}",
                f"more than one subnet in {', '.join(twice)}: give one per zone",
                given,
            )
        elif sorted(given) != sorted(wanted):
            yield Finding(
                f"{PATH}.{group}",
                f"the subnets' zones {given} are not network.availability_zones {wanted}: give "
                "one subnet per zone of network.availability_zones (leave that setting out to "
                "take the private subnets' zones)",
                given,
            )
    gpu_zone = network.gpu_availability_zone
    if existing.gpu_subnet is not None and existing.gpu_subnet.availability_zone != gpu_zone:
        yield Finding(
            f"{PATH}.gpu_subnet.availability_zone",
            f"the GPU nodes run in network.gpu_availability_zone {gpu_zone}: give a subnet of "
            "that zone (or leave gpu_availability_zone out to take this subnet's)",
            existing.gpu_subnet.availability_zone,
        )


def subnets(settings: Settings) -> Iterator[Finding]:
    """Each subnet in one role (the load balancer's hold nothing else, so the pods' network
    policy admits exactly them), and every range inside the VPC's blocks."""
    existing = settings.network.existing_vpc
    if existing is None:
        return
    yield from _roles(existing)
    yield from _ranges(existing)


def _roles(existing: ExistingVpc) -> Iterator[Finding]:
    private = {subnet.subnet_id: subnet for subnet in existing.private_subnets}
    load_balancer = [subnet.subnet_id for subnet in existing.load_balancer_subnets]
    for group, ids in (
        ("private_subnets", [subnet.subnet_id for subnet in existing.private_subnets]),
        ("load_balancer_subnets", load_balancer),
    ):
        twice = sorted(subnet for subnet, count in Counter(ids).items() if count > 1)
        if twice:
            yield Finding(f"{PATH}.{group}", f"names {', '.join(twice)} twice", ids)
    gpu = existing.gpu_subnet
    shared = sorted({*load_balancer} & {*private, *([gpu.subnet_id] if gpu else [])})
    if shared:
        yield Finding(
            f"{PATH}.load_balancer_subnets",
            f"{', '.join(shared)} also hold nodes: the pods admit the load balancer's subnets "
            "on the Serve port, which would admit every pod there; give the load balancer "
            "subnets of its own",
            load_balancer,
        )
    if gpu is not None and gpu.subnet_id in private and gpu != private[gpu.subnet_id]:
        yield Finding(
            f"{PATH}.gpu_subnet",
            f"{gpu.subnet_id} is also a private subnet, with another zone or route table: "
            "give the same values, or leave gpu_subnet out to use the private subnet of the "
            "GPU zone",
            gpu.subnet_id,
        )


def _ranges(existing: ExistingVpc) -> Iterator[Finding]:
    blocks = existing.cidr_blocks
    for index, block in enumerate(blocks):
        for other in blocks[:index]:
            if block.overlaps(other):
                yield Finding(
                    f"{PATH}.cidr_blocks[{index}]",
                    f"overlaps {other}: a VPC's blocks never overlap (VPC user guide, 'VPC "
                    "CIDR blocks'); give each block once",
                    str(block),
                )
    ranges = [subnet.cidr_block for subnet in existing.load_balancer_subnets]
    for index, cidr in enumerate(ranges):
        if not any(cidr.subnet_of(block) for block in blocks):
            yield Finding(
                f"{PATH}.load_balancer_subnets[{index}].cidr_block",
                f"lies in none of network.existing_vpc.cidr_blocks "
                f"{[str(block) for block in blocks]}: add the VPC block it is in",
                str(cidr),
            )
        elif any(cidr.overlaps(other) for other in ranges[:index]):
            yield Finding(
                f"{PATH}.load_balancer_subnets[{index}].cidr_block",
                "overlaps another load balancer subnet's: subnets of a VPC never overlap",
                str(cidr),
            )


RULES = (
    Rule("existing-vpc-ids", frozenset({"network"}), id_formats),
    Rule("existing-vpc-created-only", frozenset({"network"}), created_only_settings),
    Rule("existing-vpc-zones", frozenset({"network"}), zones),
    Rule("existing-vpc-subnets", frozenset({"network"}), subnets),
)
