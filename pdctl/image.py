"""What image the deployment runs, and whether AWS has published a newer build under its tag.

The DLC tag is mutable: AWS republishes it with patch releases. The deployment's pods pull by
digest when `serving.image_digest` is set (every node the same bytes), else by tag with
IfNotPresent (each node keeps what it pulled first). This compares the digest in the registry
now with the pinned one and with what the running pods report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from app_config import Settings
from catalog.ray_llm_image import (
    IMAGES,
    NEWER_RAY_MOVE,
    NEWEST_PUBLISHED_CHECKED,
    NEWEST_PUBLISHED_TAG,
    REGISTRY_ACCOUNTS,
    REPOSITORY,
    image_uri,
)
from serving_manifests.image import cache_repository

# The manifest types ECR may hold the image as; without them BatchGetImage may not find it.
MANIFEST_TYPES = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
]


@dataclass(frozen=True)
class ImageReport:
    tag: str
    uri: str
    versions: dict[str, str]
    pinned_digest: str | None
    registry_digest: str | None
    registry_error: str | None = None
    running_digests: list[str] = field(default_factory=list)
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

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict, "newest": self.newest}


def registry_digest(
    ecr: Any, settings: Settings, account: str | None = None
) -> tuple[str | None, str | None]:
    """(digest, error): what the tag points to now where the pods pull it: the region's DLC
    registry, or, with serving.image_cache, the account's cache repository (a read through the
    cache refreshes the tag from ECR Public at most once a day)."""
    registry, repository = REGISTRY_ACCOUNTS[settings.region], REPOSITORY
    cache = settings.serving.image_cache
    if cache.enabled and account:
        registry, repository = account, cache_repository(settings)
    try:
        response = ecr.batch_get_image(
            registryId=registry,
            repositoryName=repository,
            imageIds=[{"imageTag": settings.serving.image_tag}],
            acceptedMediaTypes=MANIFEST_TYPES,
        )
    except (ClientError, BotoCoreError) as error:
        return None, str(error)
    images = response.get("images") or []
    if not images:
        failures = ", ".join(f.get("failureReason", "") for f in response.get("failures", []))
        return None, failures or "no such image"
    return images[0]["imageId"]["imageDigest"], None


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
    digest, error = (
        registry_digest(ecr, settings, account) if ecr else (None, "not asked (--no-registry)")
    )
    return ImageReport(
        tag=serving.image_tag,
        uri=uri or image_uri(settings.region, serving.image_tag, serving.image_digest),
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
    )
