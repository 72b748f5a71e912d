"""An existing VPC (network.existing_vpc): what synth checks without an account, as a table
(the setting changed -> the rule's code and the setting it names), and what is derived from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app_config import ConfigError
from app_config.model import CREATED_VPC_SETTINGS
from app_config.rules import evaluate, warnings
from tests.configurations import PROJECT_ROOT, refusals, settings_for

CONFIGURATION = "existing-vpc"
PRIVATE_A = {
    "subnet_id": "subnet-0a1b2c3d4e5f60718",
    "availability_zone": "usw2-az1",
    "route_table_id": "rtb-0a1b2c3d4e5f60718",
}
PRIVATE_B = {
    "subnet_id": "subnet-0b1b2c3d4e5f60718",
    "availability_zone": "usw2-az2",
    "route_table_id": "rtb-0b1b2c3d4e5f60718",
}
LOAD_BALANCER_A = {
    "subnet_id": "subnet-0c1b2c3d4e5f60718",
    "availability_zone": "usw2-az1",
    "route_table_id": "rtb-0a1b2c3d4e5f60718",
    "cidr_block": "10.20.255.0/27",
}
LOAD_BALANCER_B = {**LOAD_BALANCER_A, "subnet_id": "subnet-0d1b2c3d4e5f60718"}
LOAD_BALANCER_B.update(availability_zone="usw2-az2", cidr_block="10.20.255.32/27")


def _json(value: object) -> str:
    return json.dumps(value)


def _given(group: str, *subnets: dict[str, str]) -> dict[str, str]:
    """An override of one subnet setting of the example (a list, or gpu_subnet's one)."""
    value = subnets[0] if group == "gpu_subnet" else list(subnets)
    return {f"network.existing_vpc.{group}": _json(value)}


PRIVATE = _given("private_subnets", PRIVATE_A, PRIVATE_B)
LONG_SCALING = {"gpu_nodes.prefill.scaling": '{"min_size": 1, "desired_size": 1, "max_size": 200}'}

# (overrides of the example, the rule's code, the setting the finding names)
REFUSED = [
    ({"network.existing_vpc.vpc_id": "vpc-12345"}, "existing-vpc-ids", "vpc_id"),
    ({"network.existing_vpc.vpc_id": "vpc-0A1B2C3D4E5F60718"}, "existing-vpc-ids", "vpc_id"),
    ({"network.existing_vpc.vpc_id": "subnet-0a1b2c3d"}, "existing-vpc-ids", "vpc_id"),
    (
        _given("private_subnets", {**PRIVATE_A, "subnet_id": "sn-1"}, PRIVATE_B),
        "existing-vpc-ids",
        "private_subnets[0].subnet_id",
    ),
    (  # 16 hexadecimal digits: neither 8 nor 17
        {"network.existing_vpc.gpu_subnet.route_table_id": "rtb-0a1b2c3d4e5f6071"},
        "existing-vpc-ids",
        "gpu_subnet.route_table_id",
    ),
    ({"network.vpc_cidr": "10.20.0.0/16"}, "existing-vpc-created-only", "network.vpc_cidr"),
    ({"network.nat_gateways": "2"}, "existing-vpc-created-only", "network.nat_gateways"),
    (
        {"network.private_subnet_mask": "20"},
        "existing-vpc-created-only",
        "network.private_subnet_mask",
    ),
    (
        {"network.flow_log_retention_days": "30"},
        "existing-vpc-created-only",
        "network.flow_log_retention_days",
    ),
    (
        {"network.availability_zones": '["usw2-az1", "usw2-az3"]'},
        "existing-vpc-zones",
        "private_subnets",
    ),
    (
        _given("private_subnets", PRIVATE_A, {**PRIVATE_B, "availability_zone": "usw2-az1"}),
        "existing-vpc-zones",
        "private_subnets",
    ),
    (
        _given(
            "load_balancer_subnets",
            LOAD_BALANCER_A,
            {**LOAD_BALANCER_B, "availability_zone": "usw2-az3"},
        ),
        "existing-vpc-zones",
        "load_balancer_subnets",
    ),
    (  # the GPU zone given, and the GPU subnet in another
        {"network.gpu_availability_zone": "usw2-az2"},
        "existing-vpc-zones",
        "gpu_subnet.availability_zone",
    ),
    (
        {
            **PRIVATE,
            **_given(
                "load_balancer_subnets",
                {**LOAD_BALANCER_A, "subnet_id": PRIVATE_A["subnet_id"]},
                LOAD_BALANCER_B,
            ),
        },
        "existing-vpc-subnets",
        "load_balancer_subnets",
    ),
    (
        _given("private_subnets", PRIVATE_A, {**PRIVATE_B, "subnet_id": PRIVATE_A["subnet_id"]}),
        "existing-vpc-subnets",
        "private_subnets",
    ),
    (  # the GPU subnet is a private subnet, but with another route table
        {**PRIVATE, **_given("gpu_subnet", {**PRIVATE_A, "route_table_id": "rtb-0e1b2c3d"})},
        "existing-vpc-subnets",
        "gpu_subnet",
    ),
    (
        {"network.existing_vpc.cidr_blocks": '["10.20.0.0/16", "10.20.128.0/17"]'},
        "existing-vpc-subnets",
        "cidr_blocks[1]",
    ),
    (
        {"network.existing_vpc.cidr_blocks": '["10.30.0.0/16"]'},
        "existing-vpc-subnets",
        "load_balancer_subnets[0].cidr_block",
    ),
    (
        _given(
            "load_balancer_subnets",
            LOAD_BALANCER_A,
            {**LOAD_BALANCER_B, "cidr_block": "10.20.255.0/28"},
        ),
        "existing-vpc-subnets",
        "load_balancer_subnets[1].cidr_block",
    ),
]


@pytest.mark.parametrize(("overrides", "code", "path"), REFUSED)
def test_an_existing_vpc_that_cannot_be_right_is_refused_naming_the_setting(
    overrides: dict[str, str], code: str, path: str
) -> None:
    found = [(problem.code, problem.path) for problem in refusals(CONFIGURATION, **overrides)]
    expected = path if path.startswith("network.") else f"network.existing_vpc.{path}"
    assert (code, expected) in found


def test_every_setting_of_a_created_vpc_has_a_row() -> None:
    refused = {path for _, code, path in REFUSED if code == "existing-vpc-created-only"}
    # public_subnet_mask: the same rule, the same loop; one row per kind of value is enough
    assert refused | {"network.public_subnet_mask"} == {
        f"network.{s}" for s in CREATED_VPC_SETTINGS
    }


def test_the_zones_are_the_subnets_unless_given() -> None:
    settings = settings_for(CONFIGURATION)
    existing = settings.network.existing_vpc
    assert existing is not None
    assert settings.network.availability_zones == [
        subnet.availability_zone for subnet in existing.private_subnets
    ]
    assert existing.gpu_subnet is not None
    assert settings.network.gpu_availability_zone == existing.gpu_subnet.availability_zone


def _without_gpu_subnet(tmp_path: Path) -> str:
    """The example without its gpu_subnet (a `-c` override cannot remove a key)."""
    example = yaml.safe_load((PROJECT_ROOT / "examples" / f"{CONFIGURATION}.yaml").read_text())
    del example["network"]["existing_vpc"]["gpu_subnet"]
    path = tmp_path / "without-gpu-subnet.yaml"
    path.write_text(yaml.safe_dump(example))
    return str(path)


def test_without_a_gpu_subnet_the_gpu_nodes_use_the_private_subnet_of_the_gpu_zone(
    tmp_path: Path,
) -> None:
    settings = settings_for(
        CONFIGURATION,
        config=_without_gpu_subnet(tmp_path),
        **{"network.gpu_availability_zone": "usw2-az2"},
    )
    existing = settings.network.existing_vpc
    assert existing is not None
    (expected,) = [s for s in existing.private_subnets if s.availability_zone == "usw2-az2"]
    assert existing.gpu_node_subnet(settings.network.gpu_availability_zone) == expected


def test_the_vpcs_ranges_replace_the_created_vpcs_where_the_vpc_is_admitted() -> None:
    settings = settings_for(
        CONFIGURATION, **{"network.existing_vpc.cidr_blocks": '["10.20.0.0/16", "100.64.0.0/16"]'}
    )
    assert settings.network.cidr_blocks() == ["10.20.0.0/16", "100.64.0.0/16"]
    assert settings_for("default").network.cidr_blocks() == [
        str(settings_for("default").network.vpc_cidr)
    ]


def test_the_created_vpcs_address_rules_do_not_judge_an_existing_one() -> None:
    """subnet-addresses and vpc-cidr-range judge the layout the app would create; an existing
    VPC's subnets are counted by preflight against AWS's free addresses."""
    settings = settings_for(CONFIGURATION, **LONG_SCALING)
    codes = {finding.code for finding in warnings(evaluate(settings))}
    assert not codes & {"subnet-addresses", "vpc-cidr-range"}
    created = settings_for("quickstart", **LONG_SCALING)
    assert "subnet-addresses" in {finding.code for finding in warnings(evaluate(created))}


def test_the_examples_ids_are_placeholders_to_replace(tmp_path: Path) -> None:
    found = [
        f
        for f in warnings(evaluate(settings_for(CONFIGURATION)))
        if f.code == "documentation-placeholder" and f.path == "network.existing_vpc"
    ]
    assert len(found) == 1
    assert "vpc_id" in found[0].message
    assert "gpu_subnet.subnet_id" in found[0].message
    real = {
        "network.existing_vpc.vpc_id": "vpc-0a1b2c3d4e5f60718",
        "network.existing_vpc.private_subnets": _json([PRIVATE_A, PRIVATE_B]),
        "config": _without_gpu_subnet(tmp_path),
        "network.existing_vpc.load_balancer_subnets": _json([LOAD_BALANCER_A, LOAD_BALANCER_B]),
    }
    paths = {f.path for f in warnings(evaluate(settings_for(CONFIGURATION, **real)))}
    assert "network.existing_vpc" not in paths


def test_subnets_given_by_zone_name_give_zone_names() -> None:
    names = {"usw2-az1": "us-west-2a", "usw2-az2": "us-west-2b"}

    def named(subnet: dict[str, str]) -> dict[str, str]:
        return {**subnet, "availability_zone": names[subnet["availability_zone"]]}

    settings = settings_for(
        CONFIGURATION,
        **_given("private_subnets", named(PRIVATE_A), named(PRIVATE_B)),
        **_given("gpu_subnet", named(PRIVATE_A)),
        **_given("load_balancer_subnets", named(LOAD_BALANCER_A), named(LOAD_BALANCER_B)),
    )
    assert settings.network.availability_zones == ["us-west-2a", "us-west-2b"]
    assert settings.network.gpu_availability_zone == "us-west-2a"
    with pytest.raises(ConfigError) as raised:  # a zone of another region, named as such
        settings_for(
            CONFIGURATION,
            **_given(
                "private_subnets",
                named(PRIVATE_A),
                {**PRIVATE_B, "availability_zone": "us-east-1a"},
            ),
        )
    assert "network.availability_zones[1]" in {problem.path for problem in raised.value.problems}


@pytest.mark.parametrize("prefix", [29, 30, 32])
def test_a_load_balancer_subnet_smaller_than_any_vpc_subnet_is_refused(prefix: int) -> None:
    """A VPC subnet is a /16 to a /28; a longer prefix cannot be the subnet's own CIDR, and
    leaves no 8 free addresses for the Network Load Balancer."""
    small = {**LOAD_BALANCER_A, "cidr_block": f"10.20.255.0/{prefix}"}
    problems = refusals(CONFIGURATION, **_given("load_balancer_subnets", small, LOAD_BALANCER_B))
    (problem,) = [
        p for p in problems if p.path == "network.existing_vpc.load_balancer_subnets[0].cidr_block"
    ]
    assert problem.message.startswith(f"a /{prefix} is smaller than any VPC subnet (a /16 to a /28")
