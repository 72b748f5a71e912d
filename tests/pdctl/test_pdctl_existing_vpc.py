"""pdctl preflight's checks of an existing VPC against botocore's Stubber: EC2's answers for a
healthy VPC pass, and each answer that would break the deployment fails its check alone, naming
what to change. Request and response shapes come from botocore's EC2 model."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from botocore.stub import Stubber

from app_config.rules.network import gpu_subnet_addresses
from catalog.vpc_endpoints import INTERFACE_ENDPOINT_SERVICES
from pdctl.checks import Check
from pdctl.existing_vpc import (
    LOAD_BALANCER_FREE_ADDRESSES,
    endpoint_checks,
    route_checks,
    subnet_checks,
    vpc_settings,
)
from pdctl.preflight import CLIENTS, run_preflight
from tests import aws_stubs
from tests.config.test_existing_vpc import (
    LOAD_BALANCER_A,
    LOAD_BALANCER_B,
    PRIVATE,
    PRIVATE_A,
    PRIVATE_B,
    _given,
)
from tests.configurations import settings_for

VPC = "vpc-0a1b2c3d4e5f60718"
GPU = {
    **PRIVATE_A,
    "subnet_id": "subnet-0e1b2c3d4e5f60718",
    "route_table_id": "rtb-0c1b2c3d4e5f60718",
}
NAMES = {"usw2-az1": "us-west-2b", "usw2-az2": "us-west-2a"}  # one account's mapping
# The example with ids of an account's own (the example's are documentation placeholders).
OWN = {
    "network.existing_vpc.vpc_id": VPC,
    **PRIVATE,
    **_given("gpu_subnet", GPU),
    **_given("load_balancer_subnets", LOAD_BALANCER_A, LOAD_BALANCER_B),
}
CIDR = "10.20.0.0/16"
SUBNET_RANGES = {
    PRIVATE_A["subnet_id"]: "10.20.0.0/19",
    PRIVATE_B["subnet_id"]: "10.20.32.0/19",
    GPU["subnet_id"]: "10.20.64.0/18",
    LOAD_BALANCER_A["subnet_id"]: LOAD_BALANCER_A["cidr_block"],
    LOAD_BALANCER_B["subnet_id"]: LOAD_BALANCER_B["cidr_block"],
}
NAT_ROUTE = {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-0a1b2c3d4e5f60718"}
LOCAL_ROUTE = {"DestinationCidrBlock": CIDR, "GatewayId": "local"}
S3_ROUTE = {"DestinationPrefixListId": "pl-68a54001", "GatewayId": "vpce-0a1b2c3d4e5f60718"}


def _settings(**overrides: str):
    return settings_for("existing-vpc", **{**OWN, **overrides})


def _subnets(settings) -> list[dict[str, Any]]:
    existing = settings.network.existing_vpc
    answer = {}
    for subnet in existing.subnets().values():
        answer[subnet.subnet_id] = {
            "SubnetId": subnet.subnet_id,
            "VpcId": VPC,
            "AvailabilityZoneId": subnet.availability_zone,
            "AvailabilityZone": NAMES[subnet.availability_zone],
            "CidrBlock": SUBNET_RANGES[subnet.subnet_id],
            "AvailableIpAddressCount": 16000 if subnet.subnet_id == GPU["subnet_id"] else 27,
        }
    return list(answer.values())


def _route_tables(settings) -> list[dict[str, Any]]:
    existing = settings.network.existing_vpc
    tables: dict[str, dict[str, Any]] = {}
    for subnet in existing.subnets().values():
        table = tables.setdefault(
            subnet.route_table_id,
            {
                "RouteTableId": subnet.route_table_id,
                "VpcId": VPC,
                "Associations": [],
                "Routes": [{**LOCAL_ROUTE}, {**NAT_ROUTE}],
            },
        )
        association = {"SubnetId": subnet.subnet_id, "RouteTableId": subnet.route_table_id}
        if association not in table["Associations"]:
            table["Associations"].append(association)
    main = {"RouteTableId": "rtb-0f1b2c3d4e5f60718", "VpcId": VPC, "Routes": [LOCAL_ROUTE]}
    main["Associations"] = [{"Main": True, "RouteTableId": main["RouteTableId"]}]
    return [*tables.values(), main]


def _endpoints(services: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "VpcEndpointId": f"vpce-0{index:016x}",
            "VpcEndpointType": "Interface",
            "VpcId": VPC,
            "ServiceName": f"com.amazonaws.us-west-2.{service}",
            "State": "Available",
            "PrivateDnsEnabled": True,
        }
        for index, service in enumerate(services)
    ]


def _vpc(blocks: list[str] = [CIDR], dns: bool = True) -> list[tuple[str, dict, dict]]:  # noqa: B006
    association = [
        {
            "AssociationId": f"vpc-cidr-assoc-0a1b2c3d4e5f6071{index}",
            "CidrBlock": block,
            "CidrBlockState": {"State": "associated"},
        }
        for index, block in enumerate(blocks)
    ]
    return [
        (
            "describe_vpcs",
            {"Vpcs": [{"VpcId": VPC, "CidrBlockAssociationSet": association}]},
            {"VpcIds": [VPC]},
        ),
        (
            "describe_vpc_attribute",
            {"VpcId": VPC, "EnableDnsSupport": {"Value": True}},
            {"VpcId": VPC, "Attribute": "enableDnsSupport"},
        ),
        (
            "describe_vpc_attribute",
            {"VpcId": VPC, "EnableDnsHostnames": {"Value": dns}},
            {"VpcId": VPC, "Attribute": "enableDnsHostnames"},
        ),
    ]


def _subnet_calls(settings, subnets: list[dict[str, Any]]) -> list[tuple[str, dict, dict]]:
    ids = list(dict.fromkeys(s.subnet_id for s in settings.network.existing_vpc.subnets().values()))
    return [("describe_subnets", {"Subnets": subnets}, {"SubnetIds": ids})]


def _route_calls(tables: list[dict[str, Any]]) -> list[tuple[str, dict, dict]]:
    filters = [{"Name": "vpc-id", "Values": [VPC]}]
    return [("describe_route_tables", {"RouteTables": tables}, {"Filters": filters})]


def _endpoint_calls(endpoints: list[dict[str, Any]]) -> list[tuple[str, dict, dict]]:
    filters = [
        {"Name": "vpc-id", "Values": [VPC]},
        {"Name": "vpc-endpoint-type", "Values": ["Interface"]},
    ]
    return [("describe_vpc_endpoints", {"VpcEndpoints": endpoints}, {"Filters": filters})]


def _checked(check: Callable[..., Any], settings, calls) -> list[Check]:
    ec2 = aws_stubs.client("ec2")
    with Stubber(ec2) as stubber:
        for operation, response, params in calls:
            stubber.add_response(operation, response, params)
        outcome = check(ec2, settings)
        stubber.assert_no_pending_responses()
    return outcome if isinstance(outcome, list) else [outcome]


def _healthy(settings) -> dict[str, tuple[Callable[..., Any], list]]:
    return {
        "vpc": (vpc_settings, _vpc()),
        "subnets": (subnet_checks, _subnet_calls(settings, _subnets(settings))),
        "routes": (route_checks, _route_calls(_route_tables(settings))),
        "endpoints": (endpoint_checks, _endpoint_calls([])),
    }


def test_a_healthy_existing_vpc_passes_every_check() -> None:
    settings = _settings()
    checks = []
    for check, calls in _healthy(settings).values():
        checks += _checked(check, settings, calls)
    assert [c.name for c in checks if not c.ok] == []
    assert len(checks) == 5  # the VPC, the subnets, their room, their routes, the endpoints


def _broken_subnets(settings, change: Callable[[dict[str, Any]], None], subnet_id: str) -> list:
    subnets = _subnets(settings)
    for subnet in subnets:
        if subnet["SubnetId"] == subnet_id:
            change(subnet)
    return _subnet_calls(settings, subnets)


def _broken_routes(settings, subnet_id: str, routes: list[dict[str, Any]]) -> list:
    tables = copy.deepcopy(_route_tables(settings))
    for table in tables:
        if any(a.get("SubnetId") == subnet_id for a in table["Associations"]):
            table["Associations"].remove(
                {"SubnetId": subnet_id, "RouteTableId": table["RouteTableId"]}
            )
    tables.append(
        {
            "RouteTableId": "rtb-0d1b2c3d4e5f60718",
            "VpcId": VPC,
            "Associations": [{"SubnetId": subnet_id, "RouteTableId": "rtb-0d1b2c3d4e5f60718"}],
            "Routes": [LOCAL_ROUTE, *routes],
        }
    )
    return _route_calls(tables)


IGW = {"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-0a1b2c3d4e5f60718"}
TGW = {"DestinationCidrBlock": "0.0.0.0/0", "TransitGatewayId": "tgw-0a1b2c3d4e5f60718"}
GPU_ID, PRIVATE_B_ID = GPU["subnet_id"], PRIVATE_B["subnet_id"]
GPU_TABLE, PRIVATE_B_TABLE = GPU["route_table_id"], PRIVATE_B["route_table_id"]
LB_A_ID, LB_B_ID = LOAD_BALANCER_A["subnet_id"], LOAD_BALANCER_B["subnet_id"]


def _subnet_set(key: str, value: object, subnet_id: str) -> Callable[[Any], list]:
    return lambda settings: _broken_subnets(settings, lambda x: x.update({key: value}), subnet_id)


def _without_gpu_subnet(settings) -> list:
    (call,) = _subnet_calls(settings, [s for s in _subnets(settings) if s["SubnetId"] != GPU_ID])
    return [call]


def _public_load_balancer_subnet(settings) -> list:
    tables = _route_tables(settings)
    for table in tables:
        if table["RouteTableId"] == LOAD_BALANCER_B["route_table_id"]:
            table["Routes"].append(IGW)
    return _route_calls(tables)


def _with_routes(settings, route_table_id: str, routes: list[dict[str, Any]]) -> list:
    """The healthy tables, one of them with these routes beside the local one."""
    tables = _route_tables(settings)
    for table in tables:
        if table["RouteTableId"] == route_table_id:
            table["Routes"] = [LOCAL_ROUTE, *routes]
    return _route_calls(tables)


def _routes(route_table_id: str, *routes: dict[str, Any]) -> Callable[[Any], list]:
    return lambda settings: _with_routes(settings, route_table_id, list(routes))


# (what is broken, the check it breaks (key of _healthy), EC2's answers, detail, fix fragment)
BROKEN: list[tuple[str, str, Callable[[Any], list], str, str]] = [
    (
        "a block not the VPC's",
        "vpc",
        lambda s: _vpc(["10.30.0.0/16"]),
        "10.20.0.0/16 is not one",
        "cidr_blocks",
    ),
    (
        "DNS hostnames off",
        "vpc",
        lambda s: _vpc(dns=False),
        "enableDnsHostnames is off",
        "--enable-dns-hostnames",
    ),
    (
        "a subnet of another VPC",
        "subnets",
        _subnet_set("VpcId", "vpc-0f1b2c3d4e5f60718", PRIVATE_B_ID),
        "is in vpc-0f1b2c3d4e5f60718",
        "describe-subnets",
    ),
    (
        "a subnet in another zone",
        "subnets",
        _subnet_set("AvailabilityZoneId", "usw2-az3", GPU_ID),
        "not usw2-az1",
        "describe-subnets",
    ),
    (
        "a load balancer subnet of another range",
        "subnets",
        _subnet_set("CidrBlock", "10.20.254.0/27", LB_A_ID),
        "not 10.20.255.0/27",
        "CidrBlock",
    ),
    ("a subnet that does not exist", "subnets", _without_gpu_subnet, "does not exist", "subnets"),
    (
        "a GPU subnet too small for max_size",
        "subnets",
        _subnet_set("AvailableIpAddressCount", 100, GPU_ID),
        "has 100 free addresses and may need",
        "larger gpu_subnet",
    ),
    (
        "a load balancer subnet without room for an NLB",
        "subnets",
        _subnet_set("AvailableIpAddressCount", 3, LB_B_ID),
        f"needs {LOAD_BALANCER_FREE_ADDRESSES}",
        "free addresses",
    ),
    (
        "a private subnet that is public",
        "routes",
        _routes(PRIVATE_B_TABLE, IGW),
        "internet gateway",
        "no igw- route",
    ),
    ("no way out", "routes", _routes(PRIVATE_B_TABLE), "Helm charts", "NAT or transit"),
    (
        "the GPU subnet without a way out, the model from Hugging Face",
        "routes",
        _routes(GPU_TABLE, S3_ROUTE),
        "serving.model.s3_uri",
        "NAT",
    ),
    (
        "another route table than the one given",
        "routes",
        lambda s: _broken_routes(s, PRIVATE_B_ID, [NAT_ROUTE]),
        "uses rtb-0d1b2c3d4e5f60718",
        "route table",
    ),
    (
        "a public load balancer subnet for an internal endpoint",
        "routes",
        _public_load_balancer_subnet,
        "the endpoint's scheme needs private",
        "route table",
    ),
    (
        "an endpoint the app would create",
        "endpoints",
        lambda s: _endpoint_calls(_endpoints(["sts"])),
        "already in the VPC",
        "interface_endpoints_exist true",
    ),
]


@pytest.mark.parametrize(("broken", "check", "answers", "detail", "fix"), BROKEN)
def test_each_broken_answer_fails_its_check_alone_naming_the_fix(
    broken: str, check: str, answers: Callable[[Any], list], detail: str, fix: str
) -> None:
    settings = _settings()
    outcomes = []
    for key, (function, calls) in _healthy(settings).items():
        outcomes += _checked(function, settings, answers(settings) if key == check else calls)
    failing = [c for c in outcomes if not c.ok]
    assert len(failing) == 1, (broken, failing)
    assert detail in failing[0].detail
    assert fix in failing[0].fix


def test_the_gpu_subnet_counts_what_the_rule_counts() -> None:
    """Free addresses are judged with the rule subnet-addresses' own count (not re-derived): a
    subnet of the GPU nodes alone holds the node groups' share."""
    settings = _settings()
    needed = gpu_subnet_addresses(settings)
    own = sum(count for what, count in needed.items() if what.startswith("gpu_nodes"))
    for free, ok in ((own, True), (own - 1, False)):
        calls = _subnet_set("AvailableIpAddressCount", free, GPU_ID)(settings)
        (_, room) = _checked(subnet_checks, settings, calls)
        assert room.ok is ok


def test_without_a_way_out_a_gpu_subnet_of_its_own_needs_the_model_in_s3_and_s3s_route() -> None:
    settings = _settings(**{"serving.model.s3_uri": "s3://models-of-the-team/qwen/Qwen3-8B"})
    (check,) = _checked(route_checks, settings, _with_routes(settings, GPU_TABLE, [S3_ROUTE]))
    assert check.ok, check
    (check,) = _checked(route_checks, settings, _with_routes(settings, GPU_TABLE, []))
    assert not check.ok


@pytest.mark.parametrize(
    "way_out",
    [
        TGW,
        {"DestinationCidrBlock": "0.0.0.0/0", "NetworkInterfaceId": "eni-0a1b2c3d4e5f60718"},
        {"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "vpce-0a1b2c3d4e5f60718"},
    ],
)
def test_a_transit_gateway_a_nat_instance_or_a_firewall_endpoint_is_a_way_out(way_out) -> None:
    settings = _settings()
    (check,) = _checked(route_checks, settings, _with_routes(settings, PRIVATE_B_TABLE, [way_out]))
    assert check.ok, check


@pytest.mark.parametrize("present", [list(INTERFACE_ENDPOINT_SERVICES)[:-1], []])
def test_endpoints_said_to_exist_must_all_be_there(present: list[str]) -> None:
    settings = _settings(**{"network.existing_vpc.interface_endpoints_exist": "true"})
    (check,) = _checked(endpoint_checks, settings, _endpoint_calls(_endpoints(present)))
    assert not check.ok
    assert list(INTERFACE_ENDPOINT_SERVICES)[-1] in check.detail
    every = _endpoint_calls(_endpoints(list(INTERFACE_ENDPOINT_SERVICES)))
    (check,) = _checked(endpoint_checks, settings, every)
    assert check.ok


EXISTING_VPC_CHECKS = {
    "existing VPC",
    "existing subnets",
    "existing subnets: routes",
    "interface endpoints",
}


def test_preflight_runs_the_existing_vpc_checks_only_for_an_existing_vpc() -> None:
    clients = {name: aws_stubs.Unanswered() for name in CLIENTS}
    checks = run_preflight(clients, _settings())
    assert {check.name for check in checks} >= EXISTING_VPC_CHECKS
    assert not any(c.ok for c in checks if c.name in EXISTING_VPC_CHECKS)  # never a pass
    default = run_preflight(clients, settings_for("default"))
    assert not EXISTING_VPC_CHECKS & {check.name for check in default}


INTERNET_FACING = {
    "serving.endpoint.authentication": "none",
    "serving.endpoint.scheme": "internet-facing",
    "serving.endpoint.source_cidrs": '["198.51.100.0/24"]',
    "serving.endpoint.certificate_arn": (
        "arn:aws:acm:us-west-2:240318571604:certificate/0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"
    ),
}


def test_an_internet_facing_endpoint_needs_public_load_balancer_subnets() -> None:
    settings = _settings(**INTERNET_FACING)
    (check,) = _checked(route_checks, settings, _route_calls(_route_tables(settings)))
    assert not check.ok
    assert "is private; the endpoint's scheme needs public" in check.detail
    tables = _route_tables(settings)
    lb_tables = {s["route_table_id"] for s in (LOAD_BALANCER_A, LOAD_BALANCER_B)}
    public = {
        "RouteTableId": "rtb-0f2b2c3d4e5f60718",
        "VpcId": VPC,
        "Associations": [],
        "Routes": [LOCAL_ROUTE, IGW],
    }
    for table in tables:
        if table["RouteTableId"] in lb_tables:
            table["Associations"] = [
                a for a in table["Associations"] if a["SubnetId"] not in (LB_A_ID, LB_B_ID)
            ]
    public["Associations"] = [
        {"SubnetId": lb, "RouteTableId": public["RouteTableId"]} for lb in (LB_A_ID, LB_B_ID)
    ]
    settings = _settings(
        **{
            **INTERNET_FACING,
            **_given(
                "load_balancer_subnets",
                {**LOAD_BALANCER_A, "route_table_id": public["RouteTableId"]},
                {**LOAD_BALANCER_B, "route_table_id": public["RouteTableId"]},
            ),
        }
    )
    (check,) = _checked(route_checks, settings, _route_calls([*tables, public]))
    assert check.ok, check


@pytest.mark.parametrize(
    ("check", "operation", "code", "inconclusive"),
    [
        (vpc_settings, "describe_vpcs", "InvalidVpcID.NotFound", False),
        (subnet_checks, "describe_subnets", "InvalidSubnetID.NotFound", False),
        (subnet_checks, "describe_subnets", "UnauthorizedOperation", True),
    ],
)
def test_an_id_ec2_does_not_know_fails_and_a_refusal_cannot_decide(
    check: Callable[..., Any], operation: str, code: str, inconclusive: bool
) -> None:
    ec2 = aws_stubs.client("ec2")
    with Stubber(ec2) as stubber:
        stubber.add_client_error(operation, service_error_code=code, service_message=code)
        outcome = check(ec2, _settings())
    (result,) = outcome if isinstance(outcome, list) else [outcome]
    assert not result.ok
    assert result.inconclusive is inconclusive
