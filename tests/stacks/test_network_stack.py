"""The VPC: zones, subnets, endpoints, flow logs, default security group."""

from __future__ import annotations

from ipaddress import IPv4Network

from app_config.model import ENDPOINT_SUBNET_MASK
from catalog.vpc_endpoints import INTERFACE_ENDPOINT_SERVICES
from tests.conftest import Synthesized


def test_a_public_a_private_and_a_load_balancer_subnet_per_configured_zone(
    default_app: Synthesized,
) -> None:
    network = default_app.settings.network
    subnets = default_app.resources("network", "AWS::EC2::Subnet").values()
    zones = sorted(s["Properties"]["AvailabilityZoneId"] for s in subnets)
    assert zones == sorted(network.availability_zones * 3)
    assert all("AvailabilityZone" not in s["Properties"] for s in subnets)
    masks = sorted(IPv4Network(s["Properties"]["CidrBlock"]).prefixlen for s in subnets)
    assert masks == sorted(
        [network.private_subnet_mask, network.public_subnet_mask, ENDPOINT_SUBNET_MASK] * 2
    )
    ranges = [IPv4Network(s["Properties"]["CidrBlock"]) for s in subnets]
    used = sum(r.num_addresses for r in ranges)
    assert used == network.required_addresses()  # what the configuration checks against


def test_zone_names_stay_names(public_app: Synthesized) -> None:
    subnets = public_app.resources("network", "AWS::EC2::Subnet").values()
    zones = {s["Properties"]["AvailabilityZone"] for s in subnets}
    assert zones == set(public_app.settings.network.availability_zones)


def test_nat_gateways_follow_configuration(
    default_app: Synthesized, public_app: Synthesized
) -> None:
    for synthesized in (default_app, public_app):
        nats = synthesized.resources("network", "AWS::EC2::NatGateway")
        assert len(nats) == synthesized.settings.network.nat_gateways


def test_no_subnet_gives_instances_public_addresses(default_app: Synthesized) -> None:
    for subnet in default_app.resources("network", "AWS::EC2::Subnet").values():
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is False


def test_image_pulls_and_aws_calls_stay_off_nat(default_app: Synthesized) -> None:
    endpoints = default_app.resources("network", "AWS::EC2::VPCEndpoint").values()
    gateway = [e for e in endpoints if e["Properties"].get("VpcEndpointType") == "Gateway"]
    interface = [e for e in endpoints if e["Properties"].get("VpcEndpointType") == "Interface"]
    assert len(gateway) == 1  # S3: ECR image layers and model weights
    assert len(interface) == len(INTERFACE_ENDPOINT_SERVICES)
    assert all(e["Properties"]["PrivateDnsEnabled"] for e in interface)


def test_endpoints_admit_https_from_the_vpc_only(default_app: Synthesized) -> None:
    cidr = str(default_app.settings.network.vpc_cidr)
    groups = default_app.resources("network", "AWS::EC2::SecurityGroup").values()
    ingress = [
        rule for group in groups for rule in group["Properties"].get("SecurityGroupIngress", [])
    ]
    assert ingress == [
        {
            "CidrIp": cidr,
            "Description": "HTTPS from the VPC",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]


def test_flow_logs_capture_all_traffic_into_an_encrypted_log_group(
    default_app: Synthesized,
) -> None:
    (flow_log,) = default_app.resources("network", "AWS::EC2::FlowLog").values()
    assert flow_log["Properties"]["TrafficType"] == "ALL"
    (log_group,) = default_app.resources("network", "AWS::Logs::LogGroup").values()
    retention = default_app.settings.network.flow_log_retention_days
    assert log_group["Properties"]["RetentionInDays"] == retention
    assert "KmsKeyId" in log_group["Properties"]


def test_default_security_group_is_stripped(default_app: Synthesized) -> None:
    assert default_app.resources("network", "Custom::VpcRestrictDefaultSG")


def test_load_balancer_controller_can_discover_subnets(default_app: Synthesized) -> None:
    tag_keys = [
        tag["Key"]
        for subnet in default_app.resources("network", "AWS::EC2::Subnet").values()
        for tag in subnet["Properties"]["Tags"]
    ]
    zones = len(default_app.settings.network.availability_zones)
    assert tag_keys.count("kubernetes.io/role/elb") == zones
    assert tag_keys.count("kubernetes.io/role/internal-elb") == zones
