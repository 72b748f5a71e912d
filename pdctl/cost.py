"""Hourly and daily cost of a configuration, from the AWS Price List API (on-demand prices).

Counted: GPU and system nodes at desired_size (the count at creation; the Cluster Autoscaler
then moves it between min_size and max_size, which the GPU rows' notes give), the EKS control
plane, NAT gateways, interface endpoints (one ENI per zone each). Not counted: data transfer, EBS
volumes, load balancer capacity units, CloudWatch. Capacity Blocks and reservations are billed at
their own price; their rows show the on-demand rate as a reference and say so.

Prices come from the Price List API (credentials needed, any account) or, before an account
exists, from the catalog's list prices (catalog/prices.py), every row then marked as such.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from app_config import Settings
from catalog import prices as catalog_prices
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
    unit_price_per_hour: float | None  # None: no price known (catalog prices only)
    note: str = ""

    @property
    def per_hour(self) -> float | None:
        if self.unit_price_per_hour is None:
            return None
        return self.quantity * self.unit_price_per_hour

    def as_dict(self) -> dict[str, Any]:
        per_hour = self.per_hour
        per_day = None if per_hour is None else per_hour * HOURS_PER_DAY
        return {**asdict(self), "per_hour": per_hour, "per_day": per_day}


def total_per_hour(lines: list[CostLine]) -> tuple[float, bool]:
    """The sum of the priced lines, and whether every line had a price."""
    known = [line.per_hour for line in lines if line.per_hour is not None]
    return sum(known), len(known) == len(lines)


class PriceSource(Protocol):
    label: str

    def instance(self, region: str, instance_type: str) -> float | None: ...
    def fixed(self, region: str, kind: str) -> float | None: ...


class PriceListError(LookupError):
    """The Price List API's answer holds no single usable price; one line saying why."""


def _product_prices(item: Any) -> set[float]:
    """The on-demand USD prices of one Price List product (a JSON string, or a dict)."""
    try:
        product = json.loads(item) if isinstance(item, str) else item
    except (ValueError, RecursionError):
        raise PriceListError("a product in the answer is not JSON") from None
    terms = product.get("terms") if isinstance(product, dict) else None
    on_demand = terms.get("OnDemand") if isinstance(terms, dict) else None
    if not isinstance(on_demand, dict):
        raise PriceListError("a product in the answer has no terms.OnDemand")
    prices = set()
    for term in on_demand.values():
        dimensions = term.get("priceDimensions") if isinstance(term, dict) else None
        if not isinstance(dimensions, dict):
            raise PriceListError("an on-demand term has no priceDimensions")
        for dimension in dimensions.values():
            unit = dimension.get("pricePerUnit") if isinstance(dimension, dict) else None
            usd = unit.get("USD") if isinstance(unit, dict) else None
            try:
                price = float(usd)
            except (TypeError, ValueError):
                raise PriceListError(f"a price is {str(usd)[:40]!r}, not a USD amount") from None
            if not math.isfinite(price) or price < 0:
                raise PriceListError(f"a price is {price}, not a USD amount")
            prices.add(price)
    return prices


def _price(
    pricing: Any, service: str, filters: dict[str, str], usage_type_contains: str | None = None
) -> float:
    """The single on-demand USD hourly price the filters select. Usage types carry a region
    prefix (USW2-...), hence the CONTAINS match for the fixed-price items."""
    conditions = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()]
    if usage_type_contains:
        conditions.append({"Type": "CONTAINS", "Field": "usagetype", "Value": usage_type_contains})
    response = pricing.get_products(ServiceCode=service, Filters=conditions, MaxResults=10)
    items = response.get("PriceList") if isinstance(response, dict) else None
    if not isinstance(items, list):
        raise PriceListError(f"{service}: the answer has no PriceList")
    prices: set[float] = set()
    for item in items:
        prices |= _product_prices(item)
    if len(prices) != 1:
        raise PriceListError(
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


FIXED_SERVICES = {"eks": "AmazonEKS", "nat": "AmazonEC2", "endpoint": "AmazonVPC"}


@dataclass(frozen=True)
class ApiPrices:
    """Today's prices of the region, from the AWS Price List API."""

    pricing: Any
    label: str = "AWS Price List API"

    def instance(self, region: str, instance_type: str) -> float | None:
        return instance_price(self.pricing, region, instance_type)

    def fixed(self, region: str, kind: str) -> float | None:
        return _price(
            self.pricing,
            FIXED_SERVICES[kind],
            {"regionCode": region},
            usage_type_contains=FIXED_USAGE_TYPES[kind],
        )


@dataclass(frozen=True)
class CatalogPrices:
    """List prices from catalog/prices.py, of one region whatever the configured one."""

    label: str = (
        f"catalog list prices ({catalog_prices.LIST_PRICE_REGION} on-demand; "
        "catalog/prices.py), not today's price list"
    )

    def instance(self, region: str, instance_type: str) -> float | None:
        return catalog_prices.INSTANCE_HOURLY_USD.get(instance_type)

    def fixed(self, region: str, kind: str) -> float | None:
        return {
            "eks": catalog_prices.EKS_CLUSTER_HOURLY_USD,
            "nat": catalog_prices.NAT_GATEWAY_HOURLY_USD,
            "endpoint": catalog_prices.INTERFACE_ENDPOINT_HOURLY_USD,
        }[kind]


def cost_lines(prices: PriceSource, settings: Settings) -> list[CostLine]:
    region = settings.region
    missing = "no catalog price: not counted; `pdctl cost` with AWS credentials prices it"
    lines = []
    for role, group in settings.gpu_nodes.groups().items():
        scaling = group.scaling
        notes = [f"autoscaled: {scaling.min_size} to {scaling.max_size} nodes"]
        shared = settings.gpu_nodes.shared
        if group is shared:
            notes.insert(
                0,
                f"both sides on every node: prefill {shared.gpus.prefill} GPUs, decode "
                f"{shared.gpus.decode}",
            )
        if group.capacity.type != "on_demand":
            notes.append(
                f"{group.capacity.type} {group.capacity.reservation_id}: billed at the "
                "reservation's price; on-demand rate shown"
            )
        price = prices.instance(region, group.instance_type)
        if price is None:
            notes.append(missing)
        lines.append(
            CostLine(
                f"{role} nodes ({group.instance_type})",
                group.scaling.desired_size,
                price,
                "; ".join(notes),
            )
        )
    system = settings.cluster.system_nodes
    price = prices.instance(region, system.instance_type)
    lines.append(
        CostLine(
            f"system nodes ({system.instance_type})",
            system.scaling.desired_size,
            price,
            missing if price is None else "",
        )
    )
    # In an existing VPC the NAT is the VPC owner's, and so are the endpoints when they exist.
    existing = settings.network.existing_vpc
    nat_gateways = settings.network.nat_gateways if existing is None else 0
    endpoints = len(INTERFACE_ENDPOINT_SERVICES)
    if existing is not None and existing.interface_endpoints_exist:
        endpoints = 0
    # On an existing cluster the control plane is its owner's.
    control_planes = 1 if settings.cluster.existing is None else 0
    for item, quantity, kind in (
        ("EKS control plane", control_planes, "eks"),
        ("NAT gateways", nat_gateways, "nat"),
        (
            "interface endpoint ENIs",
            endpoints * len(settings.network.availability_zones),
            "endpoint",
        ),
    ):
        lines.append(CostLine(item, quantity, prices.fixed(region, kind)))
    return lines
