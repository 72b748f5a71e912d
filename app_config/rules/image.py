"""The Ray LLM image: where the region pulls it from, the account's cache of it, and the user's
mirror of it (serving.image_mirror)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.image_repository import (
    ImageRepository,
    RepositoryAddressError,
    parse_image_repository,
)
from app_config.rules import WARNING, Rule
from catalog.ray_llm_image import REGISTRY_ACCOUNTS
from catalog.regions import partition

if TYPE_CHECKING:
    from app_config.model import Settings


MIRROR = "serving.image_mirror.repository"


def registry_in_region(settings: Settings) -> Iterator[Finding]:
    """AWS's DLC registry of the region, unless the image comes from the user's mirror."""
    if settings.serving.image_mirror is None and settings.region not in REGISTRY_ACCOUNTS:
        yield Finding(
            "region",
            "has no Ray LLM DLC registry mapping (catalog/ray_llm_image.py); regions with the "
            f"image: {', '.join(sorted(REGISTRY_ACCOUNTS))}; or pull it from your own mirror "
            "(serving.image_mirror)",
            settings.region,
        )


def pinned_digest_through_cache(settings: Settings) -> Iterator[Finding]:
    """The account's cache, or a mirror that is a pull-through cache of the user's: one rule of
    ECR, one finding."""
    serving = settings.serving
    mirror = serving.image_mirror
    through = (
        "serving.image_cache"
        if serving.image_cache.enabled
        else "serving.image_mirror.pull_through_cache"
        if mirror and mirror.pull_through_cache
        else None
    )
    if through and serving.image_digest:
        yield Finding(
            "serving.image_digest",
            f"with {through}: ECR's pull-through cache imports an image only on a pull "
            "by tag, never on a first pull by digest (aws/containers-roadmap#2837), so the "
            "pinned build must already be in the cache. `pdctl preflight` checks it; on a fresh "
            "cache, deploy by tag first (or pull the tag through the cache once), then pin the "
            "digest `pdctl image` shows.",
        )


def registry_scanning_replaced(settings: Settings) -> Iterator[Finding]:
    cache = settings.serving.image_cache
    if cache.enabled and cache.scanning != "unchanged":
        yield Finding(
            "serving.image_cache.scanning",
            "(consented with replace_registry_scanning) sets this account's ECR registry "
            "scanning configuration in this region (one per registry): rules for other "
            "repositories are replaced, and `cdk destroy` leaves basic scanning without rules, "
            "not what you had before.",
            cache.scanning,
        )


def mirror_of(settings: Settings) -> ImageRepository | None:
    """The mirror's parsed address; None without a mirror or with an address that does not
    parse (image-mirror-address reports it)."""
    mirror = settings.serving.image_mirror
    if mirror is None:
        return None
    try:
        return parse_image_repository(mirror.repository)
    except RepositoryAddressError:
        return None


def mirror_address(settings: Settings) -> Iterator[Finding]:
    """An address a pull would not find: ECR's repository rules, or the image name grammar of
    the container runtime (app_config/image_repository.py)."""
    mirror = settings.serving.image_mirror
    if mirror is None:
        return
    try:
        parse_image_repository(mirror.repository)
    except RepositoryAddressError as error:
        yield Finding(MIRROR, str(error), mirror.repository)


def mirror_and_cache(settings: Settings) -> Iterator[Finding]:
    """One image address: the account's cache of ECR Public, or the user's mirror."""
    serving = settings.serving
    if serving.image_mirror and serving.image_cache.enabled:
        yield Finding(
            "serving.image_cache.enabled",
            "and serving.image_mirror both say where the pods pull the image: keep one (the "
            "cache is this app's ECR pull-through cache of ECR Public; a mirror is a "
            "repository you run, which may itself be a pull-through cache: "
            "image_mirror.pull_through_cache)",
            True,
        )


def mirror_partition(settings: Settings) -> Iterator[Finding]:
    """The node role is an IAM role of the deployment's partition: it cannot be granted a
    repository of another (IAM user guide, "IAM identifiers": ARNs name their partition)."""
    mirror = mirror_of(settings)
    if mirror and mirror.ecr and partition(mirror.ecr.region) != partition(settings.region):
        yield Finding(
            MIRROR,
            f"is in {mirror.ecr.region} (partition {partition(mirror.ecr.region)}); nodes in "
            f"{settings.region} (partition {partition(settings.region)}) cannot authenticate "
            "to it: mirror the image into a registry of this partition",
            settings.serving.image_mirror.repository,
        )


def mirror_other_region(settings: Settings) -> Iterator[Finding]:
    """The VPC's ECR endpoints answer this region's registry names only: another region's
    registry, and the S3 bucket its layers come from, are reached through the NAT gateways."""
    mirror = mirror_of(settings)
    if (
        mirror
        and mirror.ecr
        and mirror.ecr.region != settings.region
        and partition(mirror.ecr.region) == partition(settings.region)
    ):
        yield Finding(
            MIRROR,
            f"is in {mirror.ecr.region}, not {settings.region}: every node's 20+ GB pull "
            "leaves the VPC's ECR and S3 endpoints for the NAT gateways (NAT data processing "
            "and cross-region transfer charges per pull, and the pull fails wherever the VPC "
            "has no internet path). ECR cross-region replication into this region avoids both",
            settings.serving.image_mirror.repository,
        )


def mirror_other_account(settings: Settings) -> Iterator[Finding]:
    """A repository of another account admits a pull only if its repository policy allows the
    node role too (ECR user guide, "Private repository policies"): nothing this stack can
    create, and nothing preflight can see with your credentials rather than the nodes'."""
    mirror = mirror_of(settings)
    account = settings.account
    if not (mirror and mirror.ecr and account and mirror.ecr.account != account):
        return
    actions = "ecr:BatchGetImage and ecr:GetDownloadUrlForLayer"
    if settings.serving.image_mirror and settings.serving.image_mirror.pull_through_cache:
        actions += " (and ecr:BatchImportUpstreamImage)"
    yield Finding(
        MIRROR,
        f"belongs to account {mirror.ecr.account}, not {account}: its repository policy must "
        f"allow {actions} to this deployment's node role (or account {account}); "
        "`pdctl preflight` reads the repository as you, not as the nodes",
        settings.serving.image_mirror.repository,
    )


def mirror_not_ecr(settings: Settings) -> Iterator[Finding]:
    """What cannot be checked for a registry that is not ECR, and what the nodes lack for it."""
    mirror = mirror_of(settings)
    if mirror and mirror.ecr is None:
        yield Finding(
            MIRROR,
            f"is not an ECR repository: `pdctl preflight` and `pdctl image` cannot check that "
            f"{mirror.registry} holds serving.image_tag or serving.image_digest, nor read scan "
            "findings; the nodes reach it through the NAT gateways (no VPC endpoint), and "
            "authenticate only to ECR (the kubelet's ECR credential provider): the registry "
            "must admit pulls from the VPC without credentials",
            settings.serving.image_mirror.repository,
        )


def mirror_ecr_only(settings: Settings) -> Iterator[Finding]:
    """Settings that read ECR's API, on a registry that has none."""
    mirror = settings.serving.image_mirror
    parsed = mirror_of(settings)
    if mirror is None or parsed is None or parsed.ecr is not None:
        return
    for name in ("pull_through_cache", "require_clean_scan"):
        if getattr(mirror, name):
            yield Finding(
                f"serving.image_mirror.{name}",
                f"needs an ECR repository (it reads or grants ECR's API); {parsed.registry} is "
                "another registry",
                True,
            )


# ECR user guide, "Using pull through cache rules", considerations: creating pull through cache
# rules is not supported in the GovCloud (and China) Regions.
PULL_THROUGH_CACHE_UNSUPPORTED = ("us-gov-",)


def mirror_pull_through_region(settings: Settings) -> Iterator[Finding]:
    """A pull-through cache mirror in a region where ECR has no pull-through cache rules."""
    mirror = settings.serving.image_mirror
    parsed = mirror_of(settings)
    if not (mirror and mirror.pull_through_cache and parsed and parsed.ecr):
        return
    if parsed.ecr.region.startswith(PULL_THROUGH_CACHE_UNSUPPORTED):
        yield Finding(
            "serving.image_mirror.pull_through_cache",
            f"ECR has no pull-through cache rules in {parsed.ecr.region} (ECR user guide, "
            "'Using pull through cache rules'): a repository there is a copy; set it false",
            True,
        )


RULES = (
    Rule("image-registry-region", frozenset({"region", "serving"}), registry_in_region),
    Rule(
        "pinned-digest-through-cache", frozenset({"serving"}), pinned_digest_through_cache, WARNING
    ),
    Rule("registry-scanning-replaced", frozenset({"serving"}), registry_scanning_replaced, WARNING),
    Rule("image-mirror-address", frozenset({"serving"}), mirror_address),
    Rule("image-mirror-and-cache", frozenset({"serving"}), mirror_and_cache),
    Rule("image-mirror-ecr-only", frozenset({"serving"}), mirror_ecr_only),
    Rule("image-mirror-pull-through-region", frozenset({"serving"}), mirror_pull_through_region),
    Rule("image-mirror-partition", frozenset({"region", "serving"}), mirror_partition),
    Rule(
        "image-mirror-other-region",
        frozenset({"region", "serving"}),
        mirror_other_region,
        WARNING,
    ),
    Rule(
        "image-mirror-other-account",
        frozenset({"account", "serving"}),
        mirror_other_account,
        WARNING,
    ),
    Rule("image-mirror-not-ecr", frozenset({"serving"}), mirror_not_ecr, WARNING),
)
