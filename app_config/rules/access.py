"""Who may reach the cluster and the endpoint, and the identifiers that name them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding, Problem
from app_config.rules import WARNING, Rule
from app_config.rules.image import mirror_of
from catalog.documentation_examples import is_example_account, is_example_resource_id
from catalog.models import canonical_spelling
from catalog.regions import partition

if TYPE_CHECKING:
    from app_config.model import Settings


def partition_problems(settings: Settings) -> list[Problem]:
    """Principals of another partition cannot be given access to a cluster in this one."""
    expected = partition(settings.region)
    return [
        Problem(
            f"cluster.{name}[{index}]",
            f"is in partition {arn.split(':')[1]}; a cluster in {settings.region} takes "
            f"principals of {expected} (arn:{expected}:iam::...)",
            arn,
        )
        for name in ("admin_principal_arns", "operator_principal_arns")
        for index, arn in enumerate(getattr(settings.cluster, name))
        if arn.split(":")[1] != expected
    ]


def regional_arns(settings: Settings) -> Iterator[Finding]:
    """ARNs of regional resources the deployment reads where it runs: in its partition (an ARN
    of another never matches a policy or a call here) and in its region."""
    named = {
        # ACM certificates are regional: a load balancer uses one of its own region (ACM user
        # guide, "Supported Regions").
        "serving.endpoint.certificate_arn": (
            settings.serving.endpoint.certificate_arn,
            f"a load balancer in {settings.region} needs an ACM certificate of {settings.region}",
        ),
        # The SecretProviderClass names no region, so the CSI driver's AWS provider calls
        # Secrets Manager in the node's region (secrets-store-csi-driver-provider-aws README,
        # "SecretProviderClass options": region), which holds only its own region's secrets.
        "serving.model.hf_token_secret_arn": (
            settings.serving.model.hf_token_secret_arn,
            "the Secrets Store CSI driver reads it from Secrets Manager in the nodes' region, "
            f"{settings.region}, which does not find another region's secret and leaves the "
            "Ray pods unable to mount it: replicate the secret to "
            f"{settings.region} (a Secrets Manager replica) and give the replica's ARN",
        ),
    }
    expected = partition(settings.region)
    for path, (arn, needs) in named.items():
        if not arn:
            continue
        arn_partition, _, region = arn.split(":")[1:4]
        if arn_partition != expected:
            yield Finding(
                path,
                f"is in partition {arn_partition}; a deployment in {settings.region} reads "
                f"ARNs of {expected} (arn:{expected}:...)",
                arn,
            )
        elif region != settings.region:
            yield Finding(path, f"is in {region}; {needs}", arn)


def certificate_in_account(settings: Settings) -> Iterator[Finding]:
    certificate = settings.serving.endpoint.certificate_arn
    account = certificate.split(":")[4] if certificate else None
    if account and settings.account and account != settings.account:
        yield Finding(
            "serving.endpoint.certificate_arn",
            f"belongs to account {account}, not {settings.account}",
            certificate,
        )


def no_cluster_admin(settings: Settings) -> Iterator[Finding]:
    """On a cluster the app creates nobody else has access; an existing cluster's admins are
    its owner's."""
    if not settings.cluster.admin_principal_arns and settings.cluster.existing is None:
        yield Finding(
            "cluster.admin_principal_arns",
            "is empty: no person or CI role can use kubectl on this cluster (only "
            "CloudFormation's kubectl provider can). Add your role's ARN.",
        )


def documentation_placeholders(settings: Settings) -> Iterator[Finding]:
    """Values copied from AWS's documentation (catalog/documentation_examples.py): the deploy
    would fail, or grant nobody. Not acknowledgeable: the fix is to replace them."""
    fix = "; replace it with your own before deploying (`pdctl preflight` refuses it)"
    if settings.account and is_example_account(settings.account):
        yield Finding("account", f"is an AWS documentation example account{fix}", settings.account)
    for name in ("admin_principal_arns", "operator_principal_arns"):
        for index, arn in enumerate(getattr(settings.cluster, name)):
            if is_example_account(arn.split(":")[4]):
                yield Finding(
                    f"cluster.{name}[{index}]",
                    f"names a principal of an AWS documentation example account{fix}",
                    arn,
                )
    mirror = mirror_of(settings)
    if mirror and mirror.ecr and is_example_account(mirror.ecr.account):
        yield Finding(
            "serving.image_mirror.repository",
            f"is in an AWS documentation example account{fix}",
            settings.serving.image_mirror.repository,
        )
    existing = settings.network.existing_vpc
    if existing is not None:
        named = {"vpc_id": existing.vpc_id}
        for where, subnet in existing.subnets().items():
            named[f"{where}.subnet_id"] = subnet.subnet_id
            named[f"{where}.route_table_id"] = subnet.route_table_id
        examples = [where for where, value in named.items() if is_example_resource_id(value)]
        if examples:  # one finding: an example file has a dozen
            yield Finding(
                "network.existing_vpc",
                f"{', '.join(examples)}: example ids, not resources of your VPC; replace "
                "them with your own before deploying (`pdctl preflight` refuses them)",
            )
    cluster = settings.cluster.existing
    if cluster is not None:
        # The endpoint's and the OIDC issuer's id is the cluster's, 32 hexadecimal capitals.
        issuer = cluster.oidc_provider_arn.rpartition("/")[2]
        named = {
            "cluster_security_group_id": is_example_resource_id(cluster.cluster_security_group_id),
            "oidc_provider_arn": is_example_account(cluster.oidc_provider_arn.split(":")[4])
            or is_example_resource_id(f"id-{issuer}"),
            "endpoint": is_example_resource_id(f"id-{cluster.endpoint.removeprefix('https://')}"),
        }
        examples = [where for where, example in named.items() if example]
        if examples:
            yield Finding(
                "cluster.existing",
                f"{', '.join(examples)}: example values, not your cluster's; replace them with "
                "`aws eks describe-cluster`'s before deploying (`pdctl preflight` refuses them)",
            )
    for role, group in settings.gpu_nodes.groups().items():
        reservation = group.capacity.reservation_id
        if reservation and is_example_resource_id(reservation):
            yield Finding(
                f"gpu_nodes.{role}.capacity.reservation_id",
                f"is an example id, not a reservation anybody made{fix}",
                reservation,
            )


def model_id_case(settings: Settings) -> Iterator[Finding]:
    model_id = settings.serving.model.id
    canonical = canonical_spelling(model_id)
    if canonical:
        yield Finding(
            "serving.model.id",
            f"differs only in case from {canonical!r}: the Hub loads either, but the API serves "
            "the model under the id as written, and clients that send the repository's own "
            f"spelling get 'model not found'; use {canonical!r}",
            model_id,
        )


RULES = (
    Rule("principal-partition", frozenset({"region", "cluster"}), partition_problems),
    Rule("arn-partition-region", frozenset({"region", "serving"}), regional_arns),
    Rule("certificate-account", frozenset({"account", "serving"}), certificate_in_account),
    Rule("no-cluster-admin", frozenset({"cluster"}), no_cluster_admin, WARNING),
    Rule(
        "documentation-placeholder",
        frozenset({"account", "cluster", "gpu_nodes", "network", "serving"}),
        documentation_placeholders,
        WARNING,
    ),
    Rule("model-id-case", frozenset({"serving"}), model_id_case, WARNING, stack="serving"),
)
