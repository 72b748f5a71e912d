"""Where the Ray pods (and pdctl's Jobs) pull the Ray LLM image from."""

from __future__ import annotations

from app_config import Settings
from app_config.image_repository import EcrRepository, ImageRepository, parse_image_repository
from catalog.ray_llm_image import (
    REGISTRY_ACCOUNTS,
    REPOSITORY,
    cached_repository,
    image_uri,
    pinned,
)


class AccountNeededError(ValueError):
    """The image cache lives in the deployment's account, which the caller did not know."""


def pod_image(settings: Settings, account: str | None) -> str:
    """AWS's DLC registry, the account's pull-through cache of ECR Public
    (serving.image_cache), or the user's mirror (serving.image_mirror); ``account`` may be a
    CloudFormation token."""
    serving = settings.serving
    mirror = mirror_repository(settings)
    if mirror:
        return pinned(mirror.uri, serving.image_tag, serving.image_digest)
    cache = None
    if serving.image_cache.enabled:
        account = account or settings.account
        if not account:
            raise AccountNeededError(
                "serving.image_cache is enabled: the image's address names the deployment's "
                "account; set `account` in the settings or pass it"
            )
        cache = (account, serving.image_cache.repository_prefix(settings.prefix))
    return image_uri(settings.region, serving.image_tag, serving.image_digest, cache)


def cache_repository(settings: Settings) -> str:
    """The account's cache repository of the Ray LLM image (serving.image_cache)."""
    return cached_repository(settings.serving.image_cache.repository_prefix(settings.prefix))


def mirror_repository(settings: Settings) -> ImageRepository | None:
    """The user's mirror (serving.image_mirror), parsed; its rule (image-mirror-address) has
    refused an address that does not parse before anything renders."""
    mirror = settings.serving.image_mirror
    return parse_image_repository(mirror.repository) if mirror else None


def pulled_ecr_repository(settings: Settings, account: str | None) -> EcrRepository | None:
    """The ECR repository the pods pull from, as the ECR API names it: the mirror's, the
    account's cache (None while the account is unknown), or the region's DLC registry; None
    for a mirror that is not ECR."""
    mirror = mirror_repository(settings)
    if mirror:
        return mirror.ecr
    if settings.serving.image_cache.enabled:
        if not account:
            return None
        return EcrRepository(account, settings.region, cache_repository(settings))
    return EcrRepository(REGISTRY_ACCOUNTS[settings.region], settings.region, REPOSITORY)
