"""Read-only checks of the target account before `cdk deploy`: what no template can show.

Every function takes the boto3 clients it reads, so tests drive them with botocore's Stubber.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from app_config import Settings
from app_config.model import GpuNodeGroup
from catalog.container_insights import log_group_kinds, log_group_name
from catalog.documentation_examples import is_example_account
from catalog.ray_llm_image import REGISTRY_ACCOUNTS, REPOSITORY
from catalog.regions import is_zone_id
from catalog.service_quotas import VcpuQuota, quota_for
from pdctl import aws_errors
from pdctl.checks import Check, failed, passed, undecided
from pdctl.existing_cluster import existing_cluster_checks
from pdctl.existing_vpc import existing_vpc_checks
from pdctl.image_cache import cache_repository_checks
from pdctl.image_mirror import mirror_checks

T = TypeVar("T")

# What `cdk bootstrap` records, and the version the synthesized templates require.
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
MIN_BOOTSTRAP_VERSION = 6
USABLE_RESERVATION_STATES = ("active", "scheduled")
# The boto3 clients run_preflight reads, by service name.
CLIENTS = ("ec2", "ssm", "service-quotas", "ecr", "iam", "cloudformation", "logs", "eks")
# An ECR client of the mirror's region (serving.image_mirror), where it is not the deployment's.
MIRROR_CLIENT = "ecr-mirror"


# DescribeAvailabilityZones' State values a subnet and its nodes can use (EC2 API reference,
# AvailabilityZone: available | information | impaired | unavailable | constrained).
USABLE_ZONE_STATES = ("available", "information")


def zones_exist(ec2: Any, settings: Settings) -> Check:
    """Every zone of network.availability_zones is an availability zone of the region (not a
    Local or Wavelength Zone) that the account can use. Synth checks only the names' shape:
    which zone IDs a region has, and which the account is opted in to, is the account's answer
    (zone IDs map to different zone names in each account)."""
    region = settings.region
    name = f"zones {', '.join(settings.network.availability_zones)} in {region}"
    answer = ec2.describe_availability_zones()["AvailabilityZones"]
    known = {zone[key]: zone for zone in answer for key in ("ZoneId", "ZoneName") if key in zone}
    problems = []
    for zone in settings.network.availability_zones:
        found = known.get(zone)
        if found is None:
            problems.append(f"{zone} is not a zone of {region} this account can use")
        elif found.get("ZoneType", "availability-zone") != "availability-zone":
            problems.append(f"{zone} is a {found['ZoneType']}, not an availability zone")
        elif found.get("State") not in USABLE_ZONE_STATES:
            problems.append(f"{zone} is {found.get('State')}")
    if not problems:
        return passed(name, "all available")
    usable = sorted(
        zone["ZoneId"]
        for zone in answer
        if zone.get("ZoneType", "availability-zone") == "availability-zone"
        and zone.get("State") in USABLE_ZONE_STATES
    )
    return failed(
        name,
        "; ".join(problems),
        f"set network.availability_zones to zone IDs of {region} (usable here: "
        f"{', '.join(usable) or 'none'}; `aws ec2 describe-availability-zones --region {region}`)",
    )


def instance_offered(ec2: Any, role: str, group: GpuNodeGroup, zone: str) -> Check:
    name = f"{role}: {group.instance_type} offered in {zone}"
    location_type = "availability-zone-id" if is_zone_id(zone) else "availability-zone"
    offerings = ec2.describe_instance_type_offerings(
        LocationType=location_type,
        Filters=[
            {"Name": "instance-type", "Values": [group.instance_type]},
            {"Name": "location", "Values": [zone]},
        ],
    )["InstanceTypeOfferings"]
    if offerings:
        return passed(name, "offered")
    return failed(
        name,
        "not offered in this zone",
        "pick a network.gpu_availability_zone where `aws ec2 describe-instance-type-offerings "
        f"--location-type {location_type}` lists {group.instance_type}, or use a reservation there",
    )


def efa_matches_catalog(ec2: Any, role: str, group: GpuNodeGroup) -> Check:
    name = f"{role}: {group.instance_type} EFA interfaces"
    try:
        (info,) = ec2.describe_instance_types(InstanceTypes=[group.instance_type])["InstanceTypes"]
    except ClientError as error:
        return _refused(name, error, "check the instance type and the region")
    network = info["NetworkInfo"]
    maximum = network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    if network.get("EfaSupported") and maximum == group.instance.network_cards:
        return passed(name, f"EFA supported, {maximum} interfaces, as the catalog says")
    return failed(
        name,
        f"EFA supported: {network.get('EfaSupported')}, maximum interfaces {maximum}; the catalog "
        f"expects {group.instance.network_cards}",
        "correct catalog/instances.py from `aws ec2 describe-instance-types` before deploying",
    )


def vcpu_quotas(quotas: Any, settings: Settings) -> list[Check]:
    """One check per On-Demand vCPU quota the GPU groups run under (catalog/service_quotas.py:
    P instances under one, G and VT under another), against the vCPUs of every group under it
    at max_size. Capacity Blocks do not count against any."""
    needed: dict[VcpuQuota, int] = {}
    for group in settings.gpu_nodes.groups().values():
        if group.capacity.type != "capacity_block":
            quota = quota_for(group.instance_type)
            needed[quota] = needed.get(quota, 0) + group.scaling.max_size * group.instance.vcpus
    if not needed:
        return [
            passed(
                "vCPU quotas of the GPU groups",
                "all GPU capacity comes from Capacity Blocks, which the quotas exclude",
            )
        ]
    return [_vcpu_quota(quotas, quota, vcpus) for quota, vcpus in needed.items()]


def _vcpu_quota(quotas: Any, quota: VcpuQuota, needed: int) -> Check:
    service, code = quota.service_code, quota.code
    name = f"vCPU quota {quota.name} ({code})"
    try:
        value = quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]
    except ClientError as error:
        if _code(error) != "NoSuchResourceException":
            return _refused(name, error, "allow servicequotas:GetServiceQuota")
        # Never changed in this account: the default applies.
        value = quotas.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"][
            "Value"
        ]
    if value >= needed:
        return passed(name, f"{value:.0f} vCPUs available, {needed} needed at max_size")
    return failed(
        name,
        f"{value:.0f} vCPUs, {needed} needed at max_size",
        f"request an increase: aws service-quotas request-service-quota-increase "
        f"--service-code {service} --quota-code {code} --desired-value {needed}",
    )


def documentation_placeholders(settings: Settings) -> Check:
    """Values copied from AWS's documentation left in the configuration (the examples' account
    and admin ARN, `cr-` ids): synth's `documentation-placeholder` warning, the same rule
    (app_config/rules/access.py, catalog/documentation_examples.py), failed here before a
    deploy, where it cannot be acknowledged."""
    from app_config.rules.access import documentation_placeholders as findings

    name = "no AWS documentation example ids in the configuration"
    found = [f"{finding.path} = {finding.value}" for finding in findings(settings)]
    if not found:
        return passed(name, "none")
    return failed(
        name,
        "; ".join(found),
        "replace each with your own account's id, principal or reservation (`aws sts "
        "get-caller-identity` prints the account and your ARN); the examples carry AWS "
        "documentation's ids",
    )


def reservation(
    ec2: Any, role: str, group: GpuNodeGroup, zone: str, now: datetime, window: timedelta
) -> Check | None:
    reservation_id = group.capacity.reservation_id
    if reservation_id is None:
        return None
    name = f"{role}: reservation {reservation_id}"
    try:
        (found,) = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])[
            "CapacityReservations"
        ]
    except ClientError as error:
        return _refused(name, error, "check the id and the region")
    zone_field = "AvailabilityZoneId" if is_zone_id(zone) else "AvailabilityZone"
    problems = []
    if found["State"] not in USABLE_RESERVATION_STATES:
        problems.append(f"state {found['State']}")
    start = found.get("StartDate")
    if start is not None and start > now:
        problems.append(f"starts {start:%Y-%m-%d %H:%M} UTC; nodes cannot launch before then")
    if found["InstanceType"] != group.instance_type:
        problems.append(f"instance type {found['InstanceType']}, not {group.instance_type}")
    if found.get(zone_field) != zone:
        problems.append(f"zone {found.get(zone_field)}, not {zone}")
    # The configuration caps max_size at reserved_instances (required with a reservation id):
    # the reservation must hold that many.
    reserved = group.capacity.reserved_instances
    if reserved is not None and found["TotalInstanceCount"] < reserved:
        problems.append(
            f"{found['TotalInstanceCount']} instances, capacity.reserved_instances {reserved}"
        )
    end = found.get("EndDate")
    if end is not None and end <= now + window:
        problems.append(f"ends {end:%Y-%m-%d %H:%M} UTC, within the {window} rollout window")
    if problems:
        return failed(
            name,
            "; ".join(problems),
            "fix the reservation or gpu_nodes.<role>.capacity/instance_type/scaling so they agree",
        )
    return passed(
        name, f"{found['State']}, {found['TotalInstanceCount']} x {found['InstanceType']}"
    )


def cdk_bootstrap(ssm: Any, settings: Settings) -> Check:
    name = "CDK bootstrap"
    fix = f"cdk bootstrap aws://{settings.account or '<account>'}/{settings.region}"
    try:
        value = ssm.get_parameter(Name=BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"]
    except ClientError as error:
        if _code(error) != "ParameterNotFound":
            return _refused(name, error, "allow ssm:GetParameter on /cdk-bootstrap/*")
        value = None
    if value is None:
        return failed(name, "not bootstrapped in this account and region", fix)
    if int(value) < MIN_BOOTSTRAP_VERSION:
        return failed(name, f"bootstrap version {value} < {MIN_BOOTSTRAP_VERSION}", fix)
    return passed(name, f"bootstrap version {value}")


def dlc_image(ecr: Any, settings: Settings) -> Check:
    tag, region = settings.serving.image_tag, settings.region
    name = f"Ray LLM image {REPOSITORY}:{tag} in {region}"
    fix = "choose a serving.image_tag published in this region (catalog/ray_llm_image.py)"
    try:
        # BatchGetImage is what a pull needs, so the DLC registry grants it to every account.
        response = ecr.batch_get_image(
            registryId=REGISTRY_ACCOUNTS[region],
            repositoryName=REPOSITORY,
            imageIds=[{"imageTag": tag}],
        )
    except ClientError as error:
        return _refused(name, error, fix)
    if response.get("failures") or not response.get("images"):
        reasons = ", ".join(f["failureReason"] for f in response.get("failures", []))
        return failed(name, reasons or "no such image", fix)
    return passed(name, f"published by {REGISTRY_ACCOUNTS[region]}")


def admin_principals(iam: Any, settings: Settings) -> list[Check]:
    checks = []
    for arn in settings.cluster.admin_principal_arns:
        if is_example_account(arn.split(":")[4]):
            # IAM's GetRole looks a name up in the caller's account: an example ARN's "Admin"
            # would be found there and pass.
            checks.append(
                failed(
                    f"admin principal {arn}",
                    "not looked up: its account is one of AWS documentation's examples",
                    "fix cluster.admin_principal_arns",
                )
            )
            continue
        kind, _, path_name = arn.split(":", 5)[5].partition("/")
        principal = path_name.rsplit("/", 1)[-1]
        try:
            if kind == "role":
                answer = iam.get_role(RoleName=principal)["Role"]
            else:
                answer = iam.get_user(UserName=principal)["User"]
            if not isinstance(answer, dict) or not answer.get("Arn"):
                raise KeyError("Arn")
            checks.append(passed(f"admin principal {arn}", "exists"))
        except ClientError as error:
            if _code(error) != "NoSuchEntity":
                checks.append(_refused(f"admin principal {arn}", error, "allow iam:GetRole"))
                continue
            checks.append(
                failed(
                    f"admin principal {arn}", "does not exist", "fix cluster.admin_principal_arns"
                )
            )
    return checks


def leftover_log_groups(cloudformation: Any, logs: Any, settings: Settings) -> Check:
    """Container Insights log groups have fixed names and outlive `cdk destroy` (they hold
    data): before a first deploy under the same cluster name, leftovers make it fail."""
    name = "Container Insights log groups free"
    stack = settings.stack_name("cluster")
    try:
        if not cloudformation.describe_stacks(StackName=stack)["Stacks"]:
            raise KeyError("Stacks")
        return passed(name, f"{stack} exists and owns them")
    except ClientError as error:
        if "does not exist" not in _message(error):
            return _refused(name, error, "allow cloudformation:DescribeStacks")
    kinds = log_group_kinds(settings.observability.container_logs)
    wanted = {log_group_name(settings.cluster_name, kind) for kind in kinds}
    prefix = log_group_name(settings.cluster_name, "")
    pages = logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix)
    existing = {group["logGroupName"] for page in pages for group in page["logGroups"]}
    leftover = sorted(wanted & existing)
    if not leftover:
        return passed(name, "none left from an earlier deployment")
    return failed(
        name,
        f"left from an earlier deployment: {', '.join(leftover)}",
        "export what you need, then `aws logs delete-log-group --log-group-name <name>` for "
        "each; or deploy under another cluster.name",
    )


def _refused(name: str, error: ClientError, fix: str) -> Check:
    """AWS's error for one check: an answer about the thing asked for fails it; a refusal of
    the caller, throttling or a server error leaves it undecided (pdctl/aws_errors.py)."""
    if aws_errors.cannot_decide(error):
        return undecided(
            name,
            f"AWS did not answer: {_code(error)}: {_message(error)}",
            aws_errors.hint(error),
        )
    return failed(name, _message(error), fix)


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message") or _code(error) or error)


# What reading an answer that lacks a field, or holds another type, raises.
_UNREADABLE = (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError)


def _answered(name: str, check: Callable[[], T]) -> T | Check:
    """A check whose AWS answer lacks what it reads ends as "cannot tell" naming the gap,
    never as a traceback and never as a pass."""
    try:
        return check()
    except _UNREADABLE as error:
        return undecided(
            name,
            f"AWS answered without what this check reads ({type(error).__name__}: "
            f"{str(error)[:200]})",
            "run preflight again; if it persists, check AWS_ENDPOINT_URL and proxies",
        )


def run_preflight(
    clients: dict[str, Any],
    settings: Settings,
    now: datetime | None = None,
    window: timedelta = timedelta(hours=24),
) -> list[Check]:
    """All checks, in the order an operator fixes them."""
    now = now or datetime.now(UTC)
    ec2, zone = clients["ec2"], settings.network.gpu_availability_zone
    planned: list[tuple[str, Callable[[], Check | list[Check] | None]]] = [
        ("example account ids", lambda: documentation_placeholders(settings)),
        ("CDK bootstrap", lambda: cdk_bootstrap(clients["ssm"], settings)),
        ("availability zones", lambda: zones_exist(ec2, settings)),
    ]
    if settings.network.existing_vpc is not None:
        planned += existing_vpc_checks(ec2, settings)
    if settings.cluster.existing is not None:
        planned += existing_cluster_checks(clients["eks"], clients["iam"], settings)
    for role, group in settings.gpu_nodes.groups().items():
        planned += [
            (
                f"{role}: {group.instance_type} offered in {zone}",
                partial(instance_offered, ec2, role, group, zone),
            ),
            (
                f"{role}: {group.instance_type} EFA interfaces",
                partial(efa_matches_catalog, ec2, role, group),
            ),
            (
                f"{role}: reservation {group.capacity.reservation_id}",
                partial(reservation, ec2, role, group, zone, now, window),
            ),
        ]
    planned += [
        ("vCPU quotas", lambda: vcpu_quotas(clients["service-quotas"], settings)),
        (
            "Ray LLM image",
            # With a mirror, AWS's registry is not where the pods pull: the mirror is checked.
            lambda: None if settings.serving.image_mirror else dlc_image(clients["ecr"], settings),
        ),
        ("image cache repository", lambda: cache_repository_checks(clients["ecr"], settings)),
        (
            "image mirror",
            lambda: mirror_checks(clients.get(MIRROR_CLIENT, clients["ecr"]), settings),
        ),
        ("admin principals", lambda: admin_principals(clients["iam"], settings)),
        (
            "Container Insights log groups free",
            lambda: leftover_log_groups(clients["cloudformation"], clients["logs"], settings),
        ),
    ]
    checks: list[Check] = []
    for name, check in planned:
        outcome = _answered(name, check)
        if isinstance(outcome, list):
            checks.extend(outcome)
        elif outcome is not None:
            checks.append(outcome)
    return checks
