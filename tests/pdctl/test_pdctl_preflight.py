"""pdctl preflight against botocore's Stubber: request and response shapes come from botocore's
own service models, so a wrong parameter or a misread field fails here."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from app_config import load_settings
from catalog.container_insights import log_group_kinds, log_group_name
from catalog.documentation_examples import is_example_account
from catalog.instances import CATALOG
from catalog.ray_llm_image import REGISTRY_ACCOUNTS
from catalog.service_quotas import FAMILY_QUOTAS, SERVICE_CODE, family, quota_for
from pdctl.preflight import (
    BOOTSTRAP_VERSION_PARAMETER,
    CLIENTS,
    MIN_BOOTSTRAP_VERSION,
    admin_principals,
    documentation_placeholders,
    leftover_log_groups,
    run_preflight,
    vcpu_quotas,
    zones_exist,
)
from tests import aws_stubs
from tests.configurations import EXAMPLES, PROJECT_ROOT, context_for, settings_for

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
CONFIGURATION = "reserved-capacity"  # both kinds of reservation, AZ IDs


def _clients() -> dict[str, Any]:
    return {name: aws_stubs.client(name) for name in CLIENTS}


# The configuration's decode reservation id is AWS documentation's example (cr-0fedcba9876543210),
# which preflight refuses; these runs are of an account's own ids.
OWN_RESERVATION = {"gpu_nodes.decode.capacity.reservation_id": "cr-07f3a9c1d2e4b5a68"}


def _settings(**overrides: str):
    return load_settings(context_for(CONFIGURATION, **{**OWN_RESERVATION, **overrides}))


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
    configured = settings.network.availability_zones
    zones = [
        {"ZoneName": f"{settings.region}{letter}", "ZoneId": zone, "State": "available",
         "ZoneType": "availability-zone"}
        for letter, zone in zip("abcdef", configured, strict=False)
    ]  # fmt: skip
    if broken == "zones":
        zones = zones[1:]
    zones.append({"ZoneName": f"{settings.region}-lax-1a", "ZoneId": "usw2-lax1-az1",
                  "State": "available", "ZoneType": "local-zone"})  # fmt: skip
    calls["ec2"].append(("describe_availability_zones", {"AvailabilityZones": zones}, {}))
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
    for code in _quota_codes(settings):
        calls["service-quotas"].append(
            (
                "get_service_quota",
                {"Quota": {"Value": vcpus}},
                {"ServiceCode": SERVICE_CODE, "QuotaCode": code},
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
                stubbers[name].add_response(operation, response, params)
    for stubber in stubbers.values():
        stubber.activate()
    checks = run_preflight(clients, settings, now=NOW)
    for stubber in stubbers.values():
        stubber.assert_no_pending_responses()
    return checks


def _quota_codes(settings) -> list[str]:
    """The quota codes of the GPU groups that count against one (not Capacity Blocks)."""
    codes = [
        quota_for(group.instance_type).code
        for group in settings.gpu_nodes.groups().values()
        if group.capacity.type != "capacity_block"
    ]
    return list(dict.fromkeys(codes))


# An account id that is not one of AWS documentation's examples.
OWN_ACCOUNT = "240318571604"
ADMIN = f'["arn:aws:iam::{OWN_ACCOUNT}:role/PlatformAdmins"]'


def test_a_healthy_account_passes_every_check() -> None:
    checks = _run(_settings(**{"cluster.admin_principal_arns": ADMIN}))
    assert [c.name for c in checks if not c.ok] == []
    assert len(checks) == 1 + 1 + 1 + 3 * 2 + 1 + 1 + 1 + 1 + 1


@pytest.mark.parametrize(
    ("broken", "name_fragment", "fix_fragment"),
    [
        ("bootstrap", "CDK bootstrap", "cdk bootstrap aws://"),
        ("zones", "zones", "network.availability_zones"),
        ("offering:prefill", "prefill: p5en.48xlarge offered", "describe-instance-type-offerings"),
        ("efa:decode", "decode: p5en.48xlarge EFA interfaces", "catalog/instances.py"),
        ("state:prefill", "prefill: reservation", "fix the reservation"),
        ("ends:decode", "decode: reservation", "fix the reservation"),
        ("starts:prefill", "prefill: reservation", "fix the reservation"),
        ("short:decode", "decode: reservation", "fix the reservation"),
        ("quota", "vCPU quota Running On-Demand P instances", "request-service-quota-increase"),
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


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ({"ZoneType": "local-zone"}, "is a local-zone, not an availability zone"),
        ({"State": "impaired"}, "is impaired"),
        ({"ZoneId": "usw2-az9", "ZoneName": "us-west-2z"}, "is not a zone of us-west-2"),
    ],
)
def test_a_zone_the_account_cannot_use_fails_naming_it_and_the_usable_ones(answer, detail) -> None:
    settings = _settings()
    first = settings.network.availability_zones[0]
    zones = [
        {"ZoneName": f"us-west-2{letter}", "ZoneId": zone, "State": "available",
         "ZoneType": "availability-zone"}
        for letter, zone in zip("abcdef", settings.network.availability_zones, strict=False)
    ]  # fmt: skip
    zones[0] = {**zones[0], **answer}
    client = _clients()["ec2"]
    with Stubber(client) as stubber:
        stubber.add_response("describe_availability_zones", {"AvailabilityZones": zones}, {})
        check = zones_exist(client, settings)
    assert not check.ok
    assert detail in check.detail
    assert first in check.detail or "is not a zone" in check.detail
    usable = [z["ZoneId"] for z in zones if z.get("State") == "available"
              and z.get("ZoneType") == "availability-zone"]  # fmt: skip
    assert ", ".join(sorted(usable)) in check.fix


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


class _AnswersWithoutFields:
    """A client of any AWS service whose every answer is an empty object: what an endpoint
    override, a proxy or a changed API can hand back."""

    def __getattr__(self, operation: str):
        return lambda *args, **kwargs: {}


@pytest.mark.parametrize("configuration", ["default", CONFIGURATION])
def test_answers_without_the_fields_a_check_reads_never_pass(configuration: str) -> None:
    settings = load_settings(context_for(configuration))
    clients = {name: _AnswersWithoutFields() for name in CLIENTS}
    offline = documentation_placeholders(settings).name  # reads the configuration, not AWS
    checks = [c for c in run_preflight(clients, settings, now=NOW) if c.name != offline]
    assert checks
    assert not any(check.ok for check in checks), [c.name for c in checks if c.ok]
    undecided = [check for check in checks if check.inconclusive]
    assert undecided
    assert all("AWS answered without what this check reads" in c.detail for c in undecided)


def test_every_catalog_instance_type_has_its_familys_on_demand_quota() -> None:
    """catalog/service_quotas.py covers every type the app can run GPU groups on."""
    assert {family(name) for name in CATALOG} <= set(FAMILY_QUOTAS)


@pytest.mark.parametrize("configuration", ["default", *EXAMPLES])
def test_each_gpu_group_is_checked_against_its_own_familys_vcpu_quota(configuration) -> None:
    """P types against "Running On-Demand P instances", G types against "Running On-Demand G
    and VT instances": each quota asked once, holding the vCPUs of every group under it."""
    settings = settings_for(configuration)
    expected: dict[str, int] = {}
    for group in settings.gpu_nodes.groups().values():
        if group.capacity.type != "capacity_block":
            code = FAMILY_QUOTAS[family(group.instance_type)].code
            expected[code] = expected.get(code, 0) + group.scaling.max_size * group.instance.vcpus
    client = _clients()["service-quotas"]
    with Stubber(client) as stubber:
        for code in expected:
            stubber.add_response(
                "get_service_quota",
                {"Quota": {"Value": 0.0}},
                {"ServiceCode": SERVICE_CODE, "QuotaCode": code},
            )
        checks = vcpu_quotas(client, settings)
        stubber.assert_no_pending_responses()
    if not expected:  # Capacity Blocks only
        assert [check.ok for check in checks] == [True]
        return
    assert [(c.ok, c.fix.split("--quota-code ")[1]) for c in checks] == [
        (False, f"{code} --desired-value {vcpus}") for code, vcpus in expected.items()
    ]


def test_a_g6e_trial_is_not_checked_against_the_p_instance_quota() -> None:
    settings = settings_for("trial-g6e")
    (check,) = vcpu_quotas(_AnswersWithValue(10_000.0), settings)
    assert "G and VT" in check.name
    assert "L-DB2E81BA" in check.name


class _AnswersWithValue:
    def __init__(self, value: float) -> None:
        self.value = value

    def get_service_quota(self, ServiceCode: str, QuotaCode: str) -> dict:  # noqa: N803
        return {"Quota": {"Value": self.value, "QuotaCode": QuotaCode}}


@pytest.mark.parametrize(
    ("account", "placeholder"),
    [
        ("123456789012", True),  # the CDK, CloudFormation and IAM guides' usual example
        ("012345678901", True),  # AWS Account Management reference
        ("111122223333", True),  # IAM user guide
        ("444455556666", True),
        ("777788889999", True),
        ("000000000000", True),
        ("999999999999", True),
        ("901234567890", True),  # the run wraps from 9 to 0
        (OWN_ACCOUNT, False),
        ("123456789013", False),
        ("111122224444", False),  # not consecutive runs
        ("111122223333" + "4", False),  # 13 digits: not an account id
        ("12345678901", False),
    ],
)
def test_documentation_example_accounts_follow_a_rule(account, placeholder) -> None:
    assert is_example_account(account) is placeholder


@pytest.mark.parametrize("example", EXAMPLES)
def test_preflight_fails_on_the_examples_placeholder_admin_arn(example) -> None:
    settings = settings_for(example)
    check = documentation_placeholders(settings)
    assert not check.ok
    assert not check.inconclusive
    for index, arn in enumerate(settings.cluster.admin_principal_arns):
        assert f"cluster.admin_principal_arns[{index}] = {arn}" in check.detail
    assert "aws sts get-caller-identity" in check.fix


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"account": "111122223333"}, "account = 111122223333"),
        (
            {"cluster.operator_principal_arns": '["arn:aws:iam::444455556666:role/Ops"]'},
            "cluster.operator_principal_arns[0]",
        ),
        (
            {"cluster.admin_principal_arns": '["arn:aws:iam::123456789012:user/alice"]'},
            "cluster.admin_principal_arns[0]",
        ),
    ],
)
def test_any_setting_holding_an_example_account_is_named(overrides, setting) -> None:
    check = documentation_placeholders(load_settings(context_for("default", **overrides)))
    assert not check.ok
    assert setting in check.detail


def test_own_accounts_pass_the_placeholder_check() -> None:
    settings = load_settings(
        context_for("default", account=OWN_ACCOUNT, **{"cluster.admin_principal_arns": ADMIN})
    )
    assert documentation_placeholders(settings).ok


def test_an_example_admin_arn_is_never_looked_up_in_the_callers_account() -> None:
    """IAM GetRole finds a role by name in the caller's account: the example's `Admin` may
    exist there, which must not make the example ARN pass."""

    class EveryRoleExists:
        def get_role(self, RoleName: str) -> dict:  # noqa: N803
            return {"Role": {"RoleName": RoleName, "Arn": f"arn:aws:iam::{OWN_ACCOUNT}:role/x"}}

    arns = json.dumps(
        [f"arn:aws:iam::{account}:role/Admin" for account in ("123456789012", OWN_ACCOUNT)]
    )
    checks = admin_principals(
        EveryRoleExists(), _settings(**{"cluster.admin_principal_arns": arns})
    )
    assert [(check.ok, check.detail.split(":")[0]) for check in checks] == [
        (False, "not looked up"),
        (True, "exists"),
    ]


@pytest.mark.parametrize(
    ("configuration", "quoted"),
    [("default", "needs {} vCPUs of the P quota"), ("trial-g6e", "yaml` {} of the G and VT quota")],
)
def test_the_readmes_quota_figures_are_what_preflight_asks_for(configuration, quoted) -> None:
    """README, 'What you need': the vCPUs each quota must hold at max_size."""
    readme = " ".join((PROJECT_ROOT / "README.md").read_text().split())
    settings = settings_for(configuration)
    needed = sum(
        g.scaling.max_size * g.instance.vcpus for g in settings.gpu_nodes.groups().values()
    )
    assert quoted.format(needed) in readme
