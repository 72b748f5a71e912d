"""pdctl cost against botocore's Stubber for the Price List API."""

from __future__ import annotations

import json
import re

import boto3
import pytest
from botocore.stub import ANY, Stubber

from app_config import load_settings
from catalog.instances import CATALOG
from catalog.prices import INSTANCE_HOURLY_USD
from catalog.vpc_endpoints import INTERFACE_ENDPOINT_SERVICES
from pdctl.cost import (
    HOURS_PER_DAY,
    ApiPrices,
    CatalogPrices,
    PriceListError,
    cost_lines,
    total_per_hour,
)
from tests.configurations import EXAMPLES, PROJECT_ROOT, context_for, settings_for


def _product(price: str) -> str:
    return json.dumps(
        {
            "terms": {
                "OnDemand": {
                    "T1": {
                        "priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": price}}}
                    }
                }
            }
        }
    )


@pytest.fixture
def pricing():
    client = boto3.client(
        "pricing",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return client, Stubber(client)


def test_cost_adds_nodes_control_plane_nat_and_endpoints(pricing) -> None:
    client, stubber = pricing
    settings = load_settings(context_for("default"))
    prices = {"p5": "55.04", "system": "0.2016", "eks": "0.10", "nat": "0.045", "endpoint": "0.01"}
    for key in ("p5", "p5", "system", "eks", "nat", "endpoint"):
        stubber.add_response(
            "get_products",
            {"PriceList": [_product(prices[key])]},
            {"ServiceCode": ANY, "Filters": ANY, "MaxResults": 10},
        )
    with stubber:
        lines = {line.item.split(" (")[0]: line for line in cost_lines(ApiPrices(client), settings)}
    gpu = settings.gpu_nodes
    assert lines["prefill nodes"].per_hour == pytest.approx(
        55.04 * gpu.prefill.scaling.desired_size
    )
    assert lines["system nodes"].quantity == settings.cluster.system_nodes.scaling.desired_size
    endpoints = len(INTERFACE_ENDPOINT_SERVICES) * len(settings.network.availability_zones)
    assert lines["interface endpoint ENIs"].quantity == endpoints
    assert lines["NAT gateways"].quantity == settings.network.nat_gateways
    total = sum(line.per_hour for line in lines.values())
    assert lines["EKS control plane"].as_dict()["per_day"] == pytest.approx(0.10 * HOURS_PER_DAY)
    assert total > 110


@pytest.mark.parametrize("endpoints_exist", [False, True])
def test_in_an_existing_vpc_the_owners_nat_and_endpoints_are_not_the_apps_cost(
    pricing, endpoints_exist: bool
) -> None:
    client, stubber = pricing
    exist = "true" if endpoints_exist else "false"
    settings = load_settings(
        context_for("existing-vpc", **{"network.existing_vpc.interface_endpoints_exist": exist})
    )
    for _ in range(6):  # prefill, decode, system nodes, EKS, NAT, endpoint: one price each
        stubber.add_response(
            "get_products",
            {"PriceList": [_product("0.5")]},
            {"ServiceCode": ANY, "Filters": ANY, "MaxResults": 10},
        )
    with stubber:
        lines = {line.item.split(" (")[0]: line for line in cost_lines(ApiPrices(client), settings)}
    assert lines["NAT gateways"].quantity == 0
    zones = len(settings.network.availability_zones)
    expected = 0 if endpoints_exist else len(INTERFACE_ENDPOINT_SERVICES) * zones
    assert lines["interface endpoint ENIs"].quantity == expected


@pytest.mark.parametrize(
    ("configuration", "control_planes"), [("existing-vpc", 1), ("existing-cluster", 0)]
)
def test_on_an_existing_cluster_the_control_plane_is_not_the_apps_cost(
    pricing, configuration: str, control_planes: int
) -> None:
    client, stubber = pricing
    settings = load_settings(context_for(configuration))
    for _ in range(6):  # prefill, decode, system nodes, EKS, NAT, endpoint: one price each
        stubber.add_response(
            "get_products",
            {"PriceList": [_product("0.5")]},
            {"ServiceCode": ANY, "Filters": ANY, "MaxResults": 10},
        )
    with stubber:
        lines = {line.item.split(" (")[0]: line for line in cost_lines(ApiPrices(client), settings)}
    assert lines["EKS control plane"].quantity == control_planes
    # the app's own system nodes stay its cost either way
    assert lines["system nodes"].quantity == settings.cluster.system_nodes.scaling.desired_size


def test_reserved_capacity_is_marked_as_billed_elsewhere(pricing) -> None:
    client, stubber = pricing
    settings = load_settings(context_for("reserved-capacity"))
    for _ in range(6):
        stubber.add_response("get_products", {"PriceList": [_product("1.0")]})
    with stubber:
        lines = cost_lines(ApiPrices(client), settings)
    assert "capacity_block" in lines[0].note
    assert "capacity_reservation" in lines[1].note


def test_an_ambiguous_price_is_an_error_not_a_guess(pricing) -> None:
    client, stubber = pricing
    stubber.add_response("get_products", {"PriceList": [_product("1.0"), _product("2.0")]})
    with stubber, pytest.raises(PriceListError, match="expected one on-demand price"):
        cost_lines(ApiPrices(client), load_settings(context_for("default")))


@pytest.mark.parametrize(
    ("price_list", "fragment"),
    [
        ([_product("NaN")], "not a USD amount"),
        ([_product("-1.0")], "not a USD amount"),
        ([_product("free")], "not a USD amount"),
        (["{not json"], "not JSON"),
        (["[" * 100_000], "not JSON"),
        ([json.dumps({"terms": {}})], "terms.OnDemand"),
        ([json.dumps({"terms": {"OnDemand": {"T": {"priceDimensions": []}}}})], "priceDimensions"),
        ([], "found []"),
    ],
    ids=["nan", "negative", "word", "broken", "deep", "no-on-demand", "dimensions-list", "none"],
)
def test_price_list_answers_are_read_defensively(pricing, price_list, fragment) -> None:
    client, stubber = pricing
    stubber.add_response("get_products", {"PriceList": price_list})
    with stubber, pytest.raises(PriceListError, match=re.escape(fragment)):
        cost_lines(ApiPrices(client), load_settings(context_for("default")))


def test_catalog_prices_mark_what_they_cannot_price() -> None:
    unpriced = next(name for name in CATALOG if name not in INSTANCE_HOURLY_USD)
    settings = load_settings(context_for("default", **{"gpu_nodes.decode.instance_type": unpriced}))
    lines = cost_lines(CatalogPrices(), settings)
    decode = next(line for line in lines if line.item.startswith("decode"))
    assert decode.per_hour is None
    assert "no catalog price" in decode.note
    total, complete = total_per_hour(lines)
    assert not complete
    assert total == pytest.approx(sum(line.per_hour for line in lines if line.per_hour))
    prefill = next(line for line in lines if line.item.startswith("prefill"))
    assert (
        prefill.unit_price_per_hour == INSTANCE_HOURLY_USD[settings.gpu_nodes.prefill.instance_type]
    )


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_examples_gpu_types_have_a_catalog_price(example) -> None:
    """`pdctl cost` before an account exists prices every example whole: no `?` row."""
    settings = settings_for(example)
    types = {group.instance_type for group in settings.gpu_nodes.groups().values()}
    assert types <= set(INSTANCE_HOURLY_USD)
    lines = cost_lines(CatalogPrices(), settings)
    assert [line.item for line in lines if line.per_hour is None] == []
    assert total_per_hour(lines)[1]


def test_every_g6_and_g6e_size_of_the_catalog_has_a_price() -> None:
    """The trial shapes: any size a user picks from catalog/instances.py is priced."""
    trial = {name for name in CATALOG if name.startswith(("g6.", "g6e."))}
    assert trial <= set(INSTANCE_HOURLY_USD)


@pytest.mark.parametrize(
    ("example", "quoted"),
    [
        ("qwen3-235b-a22b-pd", "gives **USD {:.0f} per hour**"),
        ("deepseek-v3-pd", "give **USD {:.0f} per hour**"),
        ("trial-g6e", "gives **USD {:.0f} per hour**"),
        ("trial-one-node", "gives **USD {:.0f} per hour** with the cluster"),
        ("quickstart", "`examples/quickstart.yaml` **USD {:.0f} per hour**"),
    ],
)
def test_the_readmes_example_costs_are_what_pdctl_cost_computes(example, quoted) -> None:
    """README, 'What it costs' and 'Starting points': the figures quoted at catalog prices."""
    readme = " ".join((PROJECT_ROOT / "README.md").read_text().split())
    total, complete = total_per_hour(cost_lines(CatalogPrices(), settings_for(example)))
    assert complete
    assert quoted.format(total) in readme


def test_shared_nodes_are_one_line_that_says_both_sides_run_on_them() -> None:
    settings = settings_for("trial-one-node")
    shared = settings.gpu_nodes.shared
    lines = cost_lines(CatalogPrices(), settings)
    (gpu,) = [line for line in lines if "nodes (" in line.item and "system" not in line.item]
    assert gpu.item == f"shared nodes ({shared.instance_type})"
    assert gpu.quantity == shared.scaling.desired_size
    assert gpu.per_hour == pytest.approx(
        INSTANCE_HOURLY_USD[shared.instance_type] * shared.scaling.desired_size
    )
    assert f"prefill {shared.gpus.prefill} GPUs, decode {shared.gpus.decode}" in gpu.note
