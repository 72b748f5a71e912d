"""The EC2 vCPU quota each GPU instance family runs On-Demand under, for `pdctl preflight`.

EC2 counts running On-Demand instances against one vCPU quota per group of instance families,
per account and region (EC2 user guide, "Amazon EC2 service quotas" / "On-Demand Instance
quotas", https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html): P
instances under "Running On-Demand P instances", G and VT instances under "Running On-Demand G
and VT instances", and so on. The quota codes are Service Quotas' (service code `ec2`; `aws
service-quotas list-service-quotas --service-code ec2` lists them with these names; the Service
Quotas user guide's `get-aws-default-service-quota` example shows the same code scheme for the
Standard family, L-1216C47A). On-Demand Capacity Reservations count against the family's quota;
Capacity Blocks for ML do not (the same "On-Demand Instance quotas" page; what preflight has
assumed since its first version). Read 2026-12-02.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SERVICE_CODE = "ec2"


@dataclass(frozen=True)
class VcpuQuota:
    code: str  # Service Quotas' quota code
    name: str  # its name in the Service Quotas console

    @property
    def service_code(self) -> str:
        return SERVICE_CODE


P_INSTANCES = VcpuQuota("L-417A185B", "Running On-Demand P instances")
G_AND_VT_INSTANCES = VcpuQuota("L-DB2E81BA", "Running On-Demand G and VT instances")

# Instance family letters (the name's leading letters: p5en -> p, g6e -> g, p6-b200 -> p) and
# their On-Demand vCPU quota. Only the families catalog/instances.py offers are listed: a type
# outside them has no row, and `quota_for` says so instead of guessing.
FAMILY_QUOTAS: dict[str, VcpuQuota] = {
    "p": P_INSTANCES,
    "g": G_AND_VT_INSTANCES,
    "vt": G_AND_VT_INSTANCES,
}


def family(instance_type: str) -> str:
    """`p5en.48xlarge` -> `p`; `g6e.12xlarge` -> `g`; `vt1.3xlarge` -> `vt`."""
    match = re.match(r"[a-z]+", instance_type)
    return match.group() if match else ""


def quota_for(instance_type: str) -> VcpuQuota:
    """The On-Demand vCPU quota the type's family runs under; KeyError for a family not here."""
    letters = family(instance_type)
    if letters not in FAMILY_QUOTAS:
        raise KeyError(f"{instance_type}: no On-Demand vCPU quota for family {letters!r} here")
    return FAMILY_QUOTAS[letters]
