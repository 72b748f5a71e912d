"""Where the Ray pods (and pdctl's Jobs) pull the Ray LLM image from."""

from __future__ import annotations

from app_config import Settings
from catalog.ray_llm_image import cached_repository, image_uri


class AccountNeededError(ValueError):
    """The image cache lives in the deployment's account, which the caller did not know."""


def pod_image(settings: Settings, account: str | None) -> str:
    """AWS's DLC registry, or the account's pull-through cache of ECR Public
    (serving.image_cache); ``account`` may be a CloudFormation token."""
    serving = settings.serving
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
