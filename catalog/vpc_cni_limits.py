"""How many subnet addresses the Amazon VPC CNI can take on a node: the network interfaces it may
attach and the IPv4 addresses of each.

Source: aws/amazon-vpc-cni-k8s ``pkg/vpc/vpc_ip_resource_limit.go`` (generated from EC2's
DescribeInstanceTypes; read at commit b5218838, 2026-08, v1.22 line): ``ENILimit`` is the
interfaces of the default network card (card 0), the only card the CNI attaches pod interfaces
to unless multi-NIC is enabled, which this app does not; ``IPv4Limit`` the addresses per interface,
its primary included (EC2 user guide, "Maximum IP addresses per network interface").

The CNI's defaults (WARM_ENI_TARGET=1, no prefix delegation; the app sets neither,
constructs/cluster/core_addons.py) keep one whole interface of free addresses beside those in
use: a node holding fewer pods than one interface's secondary addresses takes two interfaces'
worth (the primary's and the warm one), a busier node one more per interface's worth of pods,
up to ENILimit. Instance types not listed here (a system node type of the user's choice) are
counted by the largest figures below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CniLimits:
    interfaces: int  # ENILimit: interfaces on network card 0
    addresses_per_interface: int  # IPv4Limit


VPC_CNI_LIMITS: dict[str, CniLimits] = {
    name: CniLimits(interfaces, addresses)
    for name, interfaces, addresses in (
        ("p4d.24xlarge", 15, 50),
        ("p4de.24xlarge", 15, 50),
        ("p5.48xlarge", 2, 50),
        ("p5e.48xlarge", 2, 50),
        ("p5en.48xlarge", 4, 50),
        ("p6-b200.48xlarge", 4, 50),
        ("g6.8xlarge", 8, 30),
        ("g6.12xlarge", 8, 30),
        ("g6.16xlarge", 15, 50),
        ("g6.24xlarge", 15, 50),
        ("g6.48xlarge", 15, 50),
        ("g6e.8xlarge", 8, 30),
        ("g6e.12xlarge", 10, 30),
        ("g6e.16xlarge", 15, 50),
        ("g6e.24xlarge", 10, 50),
        ("g6e.48xlarge", 10, 50),
        # System node types in the examples and docs.
        ("m7i.large", 3, 10),
        ("m7i.xlarge", 4, 15),
        ("m7i.2xlarge", 4, 15),
        ("m7i.4xlarge", 8, 30),
        ("m6i.xlarge", 4, 15),
        ("m6i.2xlarge", 4, 15),
        ("m5.xlarge", 4, 15),
        ("m5.2xlarge", 4, 15),
    )
}
# For a type not listed: the most any listed type can take.
UNLISTED = CniLimits(15, 50)


def cni_limits(instance_type: str) -> CniLimits:
    return VPC_CNI_LIMITS.get(instance_type, UNLISTED)


def addresses_held(instance_type: str, pods: int) -> int:
    """Subnet addresses the CNI holds on a node running ``pods`` pods with their own IP: the
    interfaces those pods fill, plus the warm one, at most every interface of card 0."""
    limits = cni_limits(instance_type)
    secondaries = limits.addresses_per_interface - 1
    in_use = max(1, -(-pods // secondaries))
    return min(limits.interfaces, in_use + 1) * limits.addresses_per_interface
