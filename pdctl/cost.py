"""Hourly and daily cost of a configuration, from the AWS Price List API (on-demand prices).

Counted: GPU and system nodes at desired_size (the count at creation; the Cluster Autoscaler
then moves it between min_size and max_size, which the GPU rows' notes give), the EKS control
plane, NAT gateways, interface endpoints (one ENI per zone each). Not counted: data transfer, EBS
volumes, load balancer capacity units, CloudWatch. Capacity Blocks and reservations are billed at
their own price; their rows show the on-demand rate as a reference and say so.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from app_config import Settings
from catalog.vpc_endpoints import INTERFACE_ENDPOINT_SERVICES

HOURS_PER_DAY = 24
# Hourly usage types of the fixed parts (AWS Price List, per service's usage types).
FIXED_USAGE_TYPES = {
    "eks": "AmazonEKS-Hours:perCluster",
    "nat": "NatGateway-Hours",
    "endpoint": "VpcEndpoint-Hours",
}


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: int
    unit_price_per_hour: float
    note: str = ""

    @property
    def per_hour(self) -> float:
        return self.quantity * self.unit_price_per_hour

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_hour": self.per_hour, "per_day": self.per_hour * HOURS_PER_DAY}


def _price(
    pricing: Any, service: str, filters: dict[str, str], usage_type_contains: str | None = None
) -> float:
    """The single on-demand USD hourly price the filters select. Usage types carry a region
    prefix (USW2-...), hence the CONTAINS match for the fixed-price items."""
    conditions = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()]
    if usage_type_contains:
        conditions.append({"Type": "CONTAINS", "Field": "usagetype", "Value": usage_type_contains})
    response = pricing.get_products(ServiceCode=service, Filters=conditions, MaxResults=10)
    prices = set()
    for item in response["PriceList"]:
        product = json.loads(item) if isinstance(item, str) else item
        for term in product["terms"]["OnDemand"].values():
            for dimension in term["priceDimensions"].values():
                prices.add(float(dimension["pricePerUnit"]["USD"]))
    if len(prices) != 1:
        raise LookupError(
            f"{service} {filters}: expected one on-demand price, found {sorted(prices)}"
        )
    return prices.pop()


def instance_price(pricing: Any, region: str, instance_type: str) -> float:
    return _price(
        pricing,
        "AmazonEC2",
        {
            "regionCode": region,
            "instanceType": instance_type,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
            "licenseModel": "No License required",
        },
    )


def cost_lines(pricing: Any, settings: Settings) -> list[CostLine]:
    region = settings.region
    lines = []
    for role, group in settings.gpu_nodes.groups().items():
        scaling = group.scaling
        notes = [f"autoscaled: {scaling.min_size} to {scaling.max_size} nodes"]
        if group.capacity.type != "on_demand":
            notes.append(
                f"{group.capacity.type} {group.capacity.reservation_id}: billed at the "
                "reservation's price; on-demand rate shown"
            )
        note = "; ".join(notes)
        lines.append(
            CostLine(
                f"{role} nodes ({group.instance_type})",
                group.scaling.desired_size,
                instance_price(pricing, region, group.instance_type),
                note,
            )
        )
    system = settings.cluster.system_nodes
    lines.append(
        CostLine(
            f"system nodes ({system.instance_type})",
            system.scaling.desired_size,
            instance_price(pricing, region, system.instance_type),
        )
    )
    for item, quantity, service, usage in (
        ("EKS control plane", 1, "AmazonEKS", FIXED_USAGE_TYPES["eks"]),
        ("NAT gateways", settings.network.nat_gateways, "AmazonEC2", FIXED_USAGE_TYPES["nat"]),
        (
            "interface endpoint ENIs",
            len(INTERFACE_ENDPOINT_SERVICES) * len(settings.network.availability_zones),
            "AmazonVPC",
            FIXED_USAGE_TYPES["endpoint"],
        ),
    ):
        price = _price(pricing, service, {"regionCode": region}, usage_type_contains=usage)
        lines.append(CostLine(item, quantity, price))
    return lines
