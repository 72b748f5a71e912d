"""pdctl preflight against botocore's Stubber: request and response shapes come from botocore's
own service models, so a wrong parameter or a misread field fails here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from app_config import load_settings
from catalog.container_insights import log_group_kinds, log_group_name
from catalog.instances import CATALOG
from catalog.ray_llm_image import REGISTRY_ACCOUNTS
from pdctl.preflight import (
    BOOTSTRAP_VERSION_PARAMETER,
    CLIENTS,
    MIN_BOOTSTRAP_VERSION,
    P_INSTANCE_VCPU_QUOTA,
    leftover_log_groups,
    run_preflight,
)
from tests.configurations import context_for

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
CONFIGURATION = "reserved-capacity"  # both kinds of reservation, AZ IDs


def _clients() -> dict[str, Any]:
    session = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-west-2"
    )
    return {name: session.client(name) for name in CLIENTS}


def _settings(**overrides: str):
    return load_settings(context_for(CONFIGURATION, **overrides))


def _healthy_responses(settings, broken: str = "") -> dict[str, list[tuple[str, dict, dict]]]:
    """(operation, response, expected params) per client, in call order; `broken` swaps one."""
    zone = settings.network.gpu_availability_zone
    calls: dict[str, list] = {name: [] for name in CLIENTS}
    version = "3" if broken == "bootstrap" else str(MIN_BOOTSTRAP_VERSION + 24)
    calls["ssm"].append(
        (
            "get_parameter",
            {
                "Parameter": {
                    "Name": BOOTSTRAP_VERSION_PARAMETER,
                    "Type": "String",
                    "Value": version,
                }
            },
            {"Name": BOOTSTRAP_VERSION_PARAMETER},
        )
    )
    for role, group in settings.gpu_nodes.groups().items():
        offered = (
            []
            if broken == f"offering:{role}"
            else [
                {
                    "InstanceType": group.instance_type,
                    "LocationType": "availability-zone-id",
                    "Location": zone,
                }
            ]
        )
        calls["ec2"].append(
            (
                "describe_instance_type_offerings",
                {"InstanceTypeOfferings": offered},
                {
                    "LocationType": "availability-zone-id",
                    "Filters": [
                        {"Name": "instance-type", "Values": [group.instance_type]},
                        {"Name": "location", "Values": [zone]},
                    ],
                },
            )
        )
        cards = group.instance.network_cards - (1 if broken == f"efa:{role}" else 0)
        calls["ec2"].append(
            (
                "describe_instance_types",
                {
                    "InstanceTypes": [
                        {
                            "InstanceType": group.instance_type,
                            "NetworkInfo": {
                                "EfaSupported": True,
                                "EfaInfo": {"MaximumEfaInterfaces": cards},
                            },
                        }
                    ]
                },
                {"InstanceTypes": [group.instance_type]},
            )
        )
        ends = NOW + (timedelta(hours=3) if broken == f"ends:{role}" else timedelta(days=14))
        calls["ec2"].append(
            (
                "describe_capacity_reservations",
                {
                    "CapacityReservations": [
                        {
                            "CapacityReservationId": group.capacity.reservation_id,
                            "InstanceType": group.instance_type,
                            "AvailabilityZoneId": zone,
                            "TotalInstanceCount": group.capacity.reserved_instances
                            - (1 if broken == f"short:{role}" else 0),
                            "State": "expired" if broken == f"state:{role}" else "active",
                            "EndDate": ends,
                            "StartDate": NOW
                            + (timedelta(days=2) if broken == f"starts:{role}" else -timedelta(1)),
                        }
                    ]
                },
                {"CapacityReservationIds": [group.capacity.reservation_id]},
            )
        )
    vcpus = 1.0 if broken == "quota" else 10_000.0
    calls["service-quotas"].append(
        (
            "get_service_quota",
            {"Quota": {"Value": vcpus}},
            {"ServiceCode": P_INSTANCE_VCPU_QUOTA[0], "QuotaCode": P_INSTANCE_VCPU_QUOTA[1]},
        )
    )
    image = {"imageTag": settings.serving.image_tag}
    found = {
        "registryId": REGISTRY_ACCOUNTS[settings.region],
        "repositoryName": "ray",
        "imageId": image,
    }
    missing = {
        "imageId": image,
        "failureCode": "ImageNotFound",
        "failureReason": "Requested image not found",
    }
    calls["ecr"].append(
        (
            "batch_get_image",
            {"images": [], "failures": [missing]}
            if broken == "image"
            else {"images": [found], "failures": []},
            {
                "registryId": REGISTRY_ACCOUNTS[settings.region],
                "repositoryName": "ray",
                "imageIds": [image],
            },
        )
    )
    # The image cache's repository: not made yet (its first pull by tag makes it).
    calls["ecr"].append(("!describe_repositories", {"code": "RepositoryNotFoundException"}, {}))
    for arn in settings.cluster.admin_principal_arns:
        name = arn.rsplit("/", 1)[-1]
        if broken == "principal":
            calls["iam"].append(("!get_role", {"code": "NoSuchEntity"}, {}))
        else:
            calls["iam"].append(
                (
                    "get_role",
                    {
                        "Role": {
                            "Path": "/",
                            "RoleName": name,
                            "RoleId": "AROAEXAMPLEEXAMPLE01",
                            "Arn": arn,
                            "CreateDate": NOW,
                        }
                    },
                    {"RoleName": name},
                )
            )
    stack = settings.stack_name("cluster")
    calls["cloudformation"].append(
        (
            "!describe_stacks",
            {"code": "ValidationError", "message": f"Stack with id {stack} does not exist"},
            {},
        )
    )
    leftover = [
        {"logGroupName": log_group_name(settings.cluster_name, kind)}
        for kind in log_group_kinds(settings.observability.container_logs)
    ]
    calls["logs"].append(
        (
            "describe_log_groups",
            {"logGroups": leftover if broken == "log-groups" else []},
            {"logGroupNamePrefix": log_group_name(settings.cluster_name, "")},
        )
    )
    return calls


def _run(settings, broken: str = ""):
    clients = _clients()
    stubbers = {name: Stubber(client) for name, client in clients.items()}
    for name, calls in _healthy_responses(settings, broken).items():
        for operation, response, params in calls:
            if operation.startswith("!"):
                stubbers[name].add_client_error(
                    operation[1:],
                    service_error_code=response["code"],
                    service_message=response.get("message", ""),
                )
            else:
                stubbers[name].add_response(operation, response, params or ANY)
    for stubber in stubbers.values():
        stubber.activate()
    checks = run_preflight(clients, settings, now=NOW)
    for stubber in stubbers.values():
        stubber.assert_no_pending_responses()
    return checks


ADMIN = '["arn:aws:iam::123456789012:role/PlatformAdmins"]'


def test_a_healthy_account_passes_every_check() -> None:
    checks = _run(_settings(**{"cluster.admin_principal_arns": ADMIN}))
    assert [c.name for c in checks if not c.ok] == []
    assert len(checks) == 1 + 3 * 2 + 1 + 1 + 1 + 1 + 1


@pytest.mark.parametrize(
    ("broken", "name_fragment", "fix_fragment"),
    [
        ("bootstrap", "CDK bootstrap", "cdk bootstrap aws://"),
        ("offering:prefill", "prefill: p5en.48xlarge offered", "describe-instance-type-offerings"),
        ("efa:decode", "decode: p5en.48xlarge EFA interfaces", "catalog/instances.py"),
        ("state:prefill", "prefill: reservation", "fix the reservation"),
        ("ends:decode", "decode: reservation", "fix the reservation"),
        ("starts:prefill", "prefill: reservation", "fix the reservation"),
        ("short:decode", "decode: reservation", "fix the reservation"),
        ("quota", "vCPU quota", "request-service-quota-increase"),
        ("image", "Ray LLM image", "serving.image_tag"),
        ("principal", "admin principal", "cluster.admin_principal_arns"),
        ("log-groups", "Container Insights log groups", "aws logs delete-log-group"),
    ],
)
def test_each_failing_check_fails_alone_and_names_the_fix(
    broken, name_fragment, fix_fragment
) -> None:
    checks = _run(_settings(**{"cluster.admin_principal_arns": ADMIN}), broken)
    failing = [c for c in checks if not c.ok]
    assert len(failing) == 1, failing
    assert name_fragment in failing[0].name
    assert fix_fragment in failing[0].fix


def test_capacity_blocks_do_not_count_against_the_vcpu_quota() -> None:
    settings = _settings()
    needed = sum(
        g.scaling.max_size * g.instance.vcpus
        for g in settings.gpu_nodes.groups().values()
        if g.capacity.type != "capacity_block"
    )
    decode = settings.gpu_nodes.decode
    assert needed == decode.scaling.max_size * CATALOG[decode.instance_type].vcpus


def test_log_groups_of_a_deployed_cluster_stack_are_its_own() -> None:
    settings = _settings()
    clients = _clients()
    cloudformation = Stubber(clients["cloudformation"])
    stack = settings.stack_name("cluster")
    cloudformation.add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": stack,
                    "CreationTime": NOW,
                    "StackStatus": "UPDATE_COMPLETE",
                }
            ]
        },
        {"StackName": stack},
    )
    with cloudformation, Stubber(clients["logs"]) as logs:  # logs is never asked
        check = leftover_log_groups(clients["cloudformation"], clients["logs"], settings)
        logs.assert_no_pending_responses()
    assert check.ok
    assert stack in check.detail
