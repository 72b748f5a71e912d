"""AWS Regions and Availability Zone naming, enough to validate placement without credentials."""

from __future__ import annotations

import re

# Regions in the aws, aws-us-gov partitions that offer Amazon EKS (AWS General Reference,
# "Amazon EKS endpoints and quotas"; checked 2026-10). China regions are out of scope: other
# partition, other ECR accounts, other IAM ARNs.
REGIONS: frozenset[str] = frozenset(
    {
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "ca-central-1",
        "ca-west-1",
        "mx-central-1",
        "sa-east-1",
        "eu-central-1",
        "eu-central-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "eu-south-1",
        "eu-south-2",
        "eu-north-1",
        "il-central-1",
        "me-south-1",
        "me-central-1",
        "af-south-1",
        "ap-east-1",
        "ap-east-2",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-7",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "us-gov-east-1",
        "us-gov-west-1",
    }
)

# Zones where EKS refuses to place a control plane (EKS user guide, "View Amazon EKS networking
# requirements for VPC and subnets": UnsupportedAvailabilityZoneException).
EKS_UNSUPPORTED_ZONE_IDS: frozenset[str] = frozenset({"use1-az3", "usw1-az2", "cac1-az3"})

_DIRECTION_CODES = {
    "north": "n",
    "south": "s",
    "east": "e",
    "west": "w",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
}

_ZONE_ID = re.compile(r"(?P<prefix>[a-z]+\d+)-az(?P<number>\d+)")
# No Region has more than six zones (EC2 user guide, "Regions and Zones"): names end in a to f,
# IDs in az1 to az6. Where the count is smaller and well known, it is here.
MAX_ZONES = 6
ZONES_IN_REGION = {
    "us-east-1": 6,
    "us-east-2": 3,
    "us-west-2": 4,
    "eu-west-1": 3,
    "eu-central-1": 3,
}


def zone_id_prefix(region: str) -> str:
    """The prefix AZ IDs of a region carry: us-east-1 -> use1, ap-northeast-1 -> apne1.

    AZ IDs (unlike AZ names) mean the same physical zone in every account, which is what capacity
    reservations and instance offerings are tied to (EC2 user guide, "AZ IDs").
    """
    *area, direction, number = region.split("-")
    letters = "".join(part[0] for part in area[1:])  # us-gov-west-1 -> "g"
    return f"{area[0]}{letters}{_DIRECTION_CODES[direction]}{number}"


def is_zone_id(zone: str) -> bool:
    return _ZONE_ID.fullmatch(zone) is not None


def zone_belongs_to_region(zone: str, region: str) -> bool:
    """Whether an AZ name (us-east-1a) or AZ ID (use1-az1) can exist in the region."""
    count = ZONES_IN_REGION.get(region, MAX_ZONES)
    match = _ZONE_ID.fullmatch(zone)
    if match:
        return match["prefix"] == zone_id_prefix(region) and 1 <= int(match["number"]) <= count
    letters = "abcdef"[:count]
    return re.fullmatch(rf"{re.escape(region)}[{letters}]", zone) is not None


def example_zones(region: str) -> str:
    """Valid spellings for an error message."""
    count = ZONES_IN_REGION.get(region, MAX_ZONES)
    last = "abcdef"[count - 1]
    return (
        f"an AZ name {region}a to {region}{last} or an AZ ID {zone_id_prefix(region)}-az1 to "
        f"-az{count}"
    )


def partition(region: str) -> str:
    """The ARN partition of a region (China is out of scope, see REGIONS)."""
    return "aws-us-gov" if region.startswith("us-gov-") else "aws"


# Regions whose AZ IDs az1 and az2 are not both zones where EKS runs: us-west-1's usw1-az2 exists
# only for some older accounts and EKS refuses it (EKS_UNSUPPORTED_ZONE_IDS); its zones are
# usw1-az1 and usw1-az3 (AWS Regions and Availability Zones, "AWS Availability Zones").
_DEFAULT_ZONE_IDS = {"us-west-1": ("usw1-az1", "usw1-az3")}


def default_zone_ids(region: str) -> list[str]:
    """The two zones a VPC gets when the configuration names none: the region's first two AZ
    IDs where EKS places control planes. AZ IDs, not names, so that no account lookup is
    needed and the zone is the same physical one in every account."""
    prefix = zone_id_prefix(region)
    return list(_DEFAULT_ZONE_IDS.get(region, (f"{prefix}-az1", f"{prefix}-az2")))
