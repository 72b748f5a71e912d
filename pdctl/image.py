"""What image the deployment runs, and whether AWS has published a newer build under its tag.

The DLC tag is mutable: AWS republishes it with patch releases. The deployment's pods pull by
digest when `serving.image_digest` is set (every node the same bytes), else by tag with
IfNotPresent (each node keeps what it pulled first). This compares the digest in the registry
now with the pinned one and with what the running pods report. With serving.image_cache, the
registry is the account's pull-through cache, which imports a build only on a pull by tag
(aws/containers-roadmap#2837): a pinned digest it does not hold cannot be pulled, so that is
asked too; with an ECR mirror (serving.image_mirror), the mirror, asked the same. A mirror that
is not ECR is not asked.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from app_config import Settings
from app_config.image_repository import EcrRepository
from catalog.ray_llm_image import (
    IMAGES,
    NEWER_RAY_MOVE,
    NEWEST_PUBLISHED_CHECKED,
    NEWEST_PUBLISHED_TAG,
    REGISTRY_ACCOUNTS,
    REPOSITORY,
    image_uri,
)
from serving_manifests.image import pod_image, pulled_ecr_repository

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# The manifest types ECR may hold the image as; without them BatchGetImage may not find it.
MANIFEST_TYPES = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
]


NOT_ASKED = "not asked (--no-registry)"
# A mirror that is not ECR (serving.image_mirror): no AWS API reads it.
NOT_ECR = (
    "not asked: the mirror is not an ECR registry (`docker buildx imagetools inspect` on the "
    "image shows its digest)"
)


@dataclass(frozen=True)
class ImageReport:
    tag: str
    uri: str
    versions: dict[str, str]
    pinned_digest: str | None
    registry_digest: str | None
    registry_error: str | None = None
    running_digests: list[str] = field(default_factory=list)
    # With the image cache or a mirror and a pinned digest: whether that repository holds the
    # build (None: not asked, or the answer was unreadable).
    pinned_in_cache: bool | None = None
    mirrored: bool = False  # serving.image_mirror: the pods pull from the user's mirror
    newest_published_tag: str = NEWEST_PUBLISHED_TAG  # as of NEWEST_PUBLISHED_CHECKED
    newer_ray_move: tuple[str, ...] = NEWER_RAY_MOVE

    @property
    def newest(self) -> str:
        """Where the configured tag stands against the newest the catalog knows AWS published."""
        when = f"AWS's newest Ray LLM DLC tag as of {NEWEST_PUBLISHED_CHECKED}"
        if self.tag == self.newest_published_tag:
            return f"{self.tag} is {when}"
        return f"{when} is {self.newest_published_tag}; this deployment runs {self.tag}"

    @property
    def verdict(self) -> str:
        if self.pinned_in_cache is False and self.mirrored:
            return (
                "the pinned build is not in the mirror: pods cannot pull it. Copy it there, or "
                "pin the mirror's digest shown here (pdctl preflight says the same)"
            )
        if self.pinned_in_cache is False:
            return (
                "the pinned build is not in the account's image cache, and the cache imports "
                "only on a pull by tag: pods cannot pull it. Pin the cache's digest shown here, "
                "or deploy once by tag first (pdctl preflight says the same)"
            )
        if self.registry_digest is None and self.registry_error == NOT_ECR:
            return f"not compared with the registry ({NOT_ECR}): the pinned and running builds only"
        if self.registry_digest is None and self.registry_error == NOT_ASKED:
            return (
                "not compared with the registry (--no-registry): the pinned and running builds only"
            )
        if self.registry_digest is None:
            return f"cannot tell: the registry did not answer ({self.registry_error})"
        current = self.pinned_digest or (
            self.running_digests[0] if len(set(self.running_digests)) == 1 else None
        )
        if len(set(self.running_digests)) > 1:
            return "pods run different builds of the tag: pin serving.image_digest"
        if current is None:
            return (
                "the registry's digest is shown; pin it with serving.image_digest so every "
                "node pulls the same bytes"
            )
        if current == self.registry_digest:
            return "current: the registry holds the same build"
        return (
            "a newer build of the tag is published: set serving.image_digest to the registry's "
            "digest and deploy (a new Ray cluster, docs/operating.md, 'Upgrading')"
        )

    @property
    def inconclusive(self) -> bool:
        """The registry was asked and gave no digest to compare: "cannot tell", which exits 2
        like every check that could not decide (docs/pdctl.md, conventions)."""
        return (
            self.registry_digest is None
            and self.registry_error not in (NOT_ASKED, NOT_ECR)
            and self.pinned_in_cache is not False
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "verdict": self.verdict,
            "newest": self.newest,
            "inconclusive": self.inconclusive,
        }


def _registry_lookup(
    ecr: Any, settings: Settings, account: str | None
) -> tuple[str | None, str | None, bool | None]:
    """(digest, error, pinned_in_cache): what the tag points to now where the pods pull it (the
    region's DLC registry, with serving.image_cache the account's cache repository, with
    serving.image_mirror the mirror), and, with the cache or a mirror and a pinned digest,
    whether that repository holds that build: one BatchGetImage."""
    serving = settings.serving
    pulled = pulled_ecr_repository(settings, account)
    if serving.image_mirror and pulled is None:
        return None, NOT_ECR, None
    if pulled is None:  # the cache, with no account to find it in: AWS's registry instead
        pulled = EcrRepository(REGISTRY_ACCOUNTS[settings.region], settings.region, REPOSITORY)
    registry, repository = pulled.account, pulled.name
    own = serving.image_mirror is not None or (serving.image_cache.enabled and bool(account))
    wanted: list[dict[str, str]] = [{"imageTag": serving.image_tag}]
    pinned = serving.image_digest if own else None
    if pinned:
        wanted.append({"imageDigest": pinned})
    try:
        response = ecr.batch_get_image(
            registryId=registry,
            repositoryName=repository,
            imageIds=wanted,
            acceptedMediaTypes=MANIFEST_TYPES,
        )
    except (ClientError, BotoCoreError) as error:
        return None, str(error), None
    images = _dicts(response.get("images") if isinstance(response, dict) else None)
    ids = [image_id for image_id in (image.get("imageId") for image in images) if _is_id(image_id)]
    tagged = [i["imageDigest"] for i in ids if i.get("imageTag") == serving.image_tag]
    failures = _dicts(response.get("failures") if isinstance(response, dict) else None)
    pinned_held = _holds(pinned, {i["imageDigest"] for i in ids}, failures) if pinned else None
    if tagged:
        return tagged[0], None, pinned_held
    reasons = [
        str(failure.get("failureReason") or failure.get("failureCode") or "")
        for failure in failures
        if _is_id(failure.get("imageId"), tag=serving.image_tag)
    ]
    return None, ", ".join(r for r in reasons if r) or "no such image", pinned_held


def _holds(digest: str, held: set[str], failures: list[dict[str, Any]]) -> bool | None:
    """True if the answer has the digest, False only if ECR said it is not there."""
    if digest in held:
        return True
    for failure in failures:
        image_id = failure.get("imageId")
        if isinstance(image_id, dict) and image_id.get("imageDigest") == digest:
            return False if failure.get("failureCode") == "ImageNotFound" else None
    return None


def _dicts(value: object) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _is_id(value: object, tag: str | None = None) -> bool:
    """An imageId with a well-formed digest (or, for a failure, the given tag)."""
    if not isinstance(value, dict):
        return False
    if tag is not None:
        return value.get("imageTag") == tag
    return isinstance(value.get("imageDigest"), str) and bool(
        DIGEST.fullmatch(value["imageDigest"])
    )


def running_digests(image_ids: list[str]) -> list[str]:
    """The digests in the pods' containerStatuses[].imageID (repository@sha256:...)."""
    return sorted({image_id.rpartition("@")[2] for image_id in image_ids if "@" in image_id})


def report(
    settings: Settings,
    ecr: Any | None,
    pod_image_ids: list[str],
    uri: str | None = None,
    account: str | None = None,
) -> ImageReport:
    """``uri``: where the pods pull from; ``account``: where an image cache lives."""
    serving = settings.serving
    image = IMAGES[serving.image_tag]
    digest, error, pinned_in_cache = (
        _registry_lookup(ecr, settings, account) if ecr else (None, NOT_ASKED, None)
    )
    return ImageReport(
        tag=serving.image_tag,
        uri=uri
        or (
            pod_image(settings, account)
            if serving.image_mirror
            else image_uri(settings.region, serving.image_tag, serving.image_digest)
        ),
        versions={
            "ray": image.ray_version,
            "vllm": image.vllm_version,
            "nixl": image.nixl_version,
            "efa_installer": image.efa_installer_version,
            "cuda": image.cuda_version,
            "python": image.python_version,
        },
        pinned_digest=serving.image_digest,
        registry_digest=digest,
        registry_error=error,
        running_digests=running_digests(pod_image_ids),
        pinned_in_cache=pinned_in_cache,
        mirrored=serving.image_mirror is not None,
    )
