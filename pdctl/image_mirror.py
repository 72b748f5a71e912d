"""The user's image mirror (serving.image_mirror), read before a deploy.

For an ECR mirror, what the nodes' pull will meet: the repository, the catalog's tag in it
(the catalog says which Ray and vLLM a tag carries, so the mirror must keep the DLC's tag),
the pinned build (by digest, pullable, and not reachable by a lifecycle rule), and, when
require_clean_scan asks, the scan of the image pulled. The reads are yours, not the nodes': a
repository of another account may answer you and still refuse the node role (synth's
image-mirror-other-account warning). For another registry, nothing can be read through an AWS
API: the one check says so and what to run instead.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from app_config import Settings
from app_config.image_repository import EcrRepository, ImageRepository
from catalog.ray_llm_image import PUBLIC_REGISTRY, PUBLIC_REPOSITORY, REGISTRY_ACCOUNTS, image_uri
from pdctl.checks import Check, failed, passed, undecided
from pdctl.image import MANIFEST_TYPES
from pdctl.image_cache import error_code, lifecycle_keeps_pinned, pinned_build, refused
from pdctl.scan_report import READABLE, SERIOUS, scan_summary
from serving_manifests.image import mirror_repository

READ_ACTIONS = "ecr:DescribeRepositories, ecr:BatchGetImage, ecr:DescribeImages"


def _copy_hint(settings: Settings, uri: str, tag: str) -> str:
    """How to fill the mirror: from the region's DLC registry, or from ECR Public where the
    region has none (catalog/ray_llm_image.py)."""
    source = (
        image_uri(settings.region, tag)
        if settings.region in REGISTRY_ACCOUNTS
        else f"{PUBLIC_REGISTRY}/{PUBLIC_REPOSITORY}:{tag}"
    )
    return (
        f"copy the DLC's build under the same tag, e.g. `crane copy {source} {uri}:{tag}` "
        "(docs/operating.md, 'A private image mirror')"
    )


def mirror_checks(ecr: Any, settings: Settings) -> list[Check]:
    """``ecr``: a client of the mirror's region. No checks without a mirror."""
    mirror = mirror_repository(settings)
    if mirror is None:
        return []
    if mirror.ecr is None:
        return [_not_ecr(mirror, settings)]
    repository = mirror.ecr
    exists = _repository(ecr, repository, settings)
    if not exists.ok:
        return [exists]
    checks = [exists, _tag(ecr, repository, settings)]
    digest = settings.serving.image_digest
    if digest:
        pull_through = bool(
            settings.serving.image_mirror and settings.serving.image_mirror.pull_through_cache
        )
        checks.append(
            pinned_build(
                ecr,
                repository.name,
                digest,
                settings,
                registry_id=repository.account,
                where="the mirror",
                missing_fix=_pull_tag_first(repository, settings)
                if pull_through
                else _copy_hint(settings, repository.uri, settings.serving.image_tag)
                + "; or pin a digest the mirror holds (`pdctl image`)",
            )
        )
        checks.append(
            lifecycle_keeps_pinned(
                ecr,
                repository.name,
                settings.serving.image_tag,
                registry_id=repository.account,
                where="mirror",
            )
        )
    if settings.serving.image_mirror and settings.serving.image_mirror.require_clean_scan:
        checks.append(_scan(ecr, repository, settings))
    return checks


def _not_ecr(mirror: ImageRepository, settings: Settings) -> Check:
    reference = f"{mirror.uri}:{settings.serving.image_tag}"
    return passed(
        f"image mirror {mirror.registry}",
        "not checked: not an ECR registry, so no AWS API reads its repository, tag, digest or "
        f"scan; check it from a machine that can reach it: `docker buildx imagetools inspect "
        f"{reference}` (the digest it prints is what serving.image_digest pins)",
    )


def _repository(ecr: Any, repository: EcrRepository, settings: Settings) -> Check:
    name = f"image mirror repository {repository.uri}"
    try:
        answer = ecr.describe_repositories(
            registryId=repository.account, repositoryNames=[repository.name]
        )
        if not answer["repositories"]:
            raise KeyError("repositories")  # no evidence that it exists: "cannot tell"
    except ClientError as error:
        if error_code(error) == "RepositoryNotFoundException":
            return failed(
                name,
                "does not exist",
                f"create it in account {repository.account} ({repository.region}) and "
                + _copy_hint(settings, repository.uri, settings.serving.image_tag),
            )
        return refused(name, error, READ_ACTIONS)
    except BotoCoreError as error:
        return undecided(name, f"AWS out of reach: {error}", "check the network and the region")
    return passed(name, f"exists in account {repository.account}")


def _tag(ecr: Any, repository: EcrRepository, settings: Settings) -> Check:
    """The catalog's tag in the mirror, read as the nodes read it (BatchGetImage)."""
    serving = settings.serving
    tag, digest = serving.image_tag, serving.image_digest
    name = f"tag {tag} in the mirror"
    try:
        answer = ecr.batch_get_image(
            registryId=repository.account,
            repositoryName=repository.name,
            imageIds=[{"imageTag": tag}],
            acceptedMediaTypes=MANIFEST_TYPES,
        )
    except ClientError as error:
        return refused(name, error, READ_ACTIONS)
    except BotoCoreError as error:
        return undecided(name, f"AWS out of reach: {error}", "check the network and the region")
    found = [
        image["imageId"]["imageDigest"]
        for image in answer.get("images") or []
        if image["imageId"].get("imageTag") == tag
    ]
    if not found:
        reasons = ", ".join(
            str(f.get("failureReason") or f.get("failureCode"))
            for f in answer.get("failures") or []
        )
        pull_through = bool(serving.image_mirror and serving.image_mirror.pull_through_cache)
        if pull_through and not digest:
            return passed(name, "not in the cache yet: the first pull by tag imports it")
        return failed(
            name,
            f"not in the mirror ({reasons or 'no such image'}): the catalog's versions are the "
            "DLC tag's, so the mirror must carry that tag",
            _copy_hint(settings, repository.uri, tag),
        )
    if digest and found[0] != digest:
        return passed(
            name,
            f"names {found[0][:19]}… now, not the pinned build (a newer build of the tag: "
            "`pdctl image`); the pods pull the pinned one, checked next",
        )
    return passed(name, f"names {found[0][:19]}…" + (" (the pinned build)" if digest else ""))


def _scan(ecr: Any, repository: EcrRepository, settings: Settings) -> Check:
    """serving.image_mirror.require_clean_scan: no critical or high finding in the scan of what
    the pods pull (the pinned digest, else the tag)."""
    name = "scan of the mirrored image"
    summary = scan_summary(ecr, settings, repository.account, repository.name)
    if summary.status not in READABLE or summary.inconclusive:
        return undecided(
            name,
            summary.verdict,
            "turn on scanning for the mirror's repository (basic on push, or Amazon Inspector) "
            f"in account {repository.account}, or set serving.image_mirror.require_clean_scan: "
            "false",
        )
    serious = {s: summary.counts[s] for s in SERIOUS if summary.counts.get(s)}
    if serious:
        return failed(
            name,
            summary.verdict,
            "pin a build without them (a newer build of the tag: `pdctl image`), or accept the "
            "findings and set serving.image_mirror.require_clean_scan: false",
        )
    return passed(name, f"{summary.verdict} ({summary.status})")


def _pull_tag_first(repository: EcrRepository, settings: Settings) -> str:
    return (
        "the mirror is a pull-through cache, which imports only on a pull by tag "
        "(aws/containers-roadmap#2837): `docker pull "
        f"{repository.uri}:{settings.serving.image_tag}` once, then pin the digest "
        "`pdctl image` shows"
    )
