"""The Ray LLM image: where the region pulls it from, and the account's cache of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.rules import WARNING, Rule
from catalog.ray_llm_image import REGISTRY_ACCOUNTS

if TYPE_CHECKING:
    from app_config.model import Settings


def registry_in_region(settings: Settings) -> Iterator[Finding]:
    if settings.region not in REGISTRY_ACCOUNTS:
        yield Finding(
            "region",
            "has no Ray LLM DLC registry mapping (catalog/ray_llm_image.py); regions with the "
            f"image: {', '.join(sorted(REGISTRY_ACCOUNTS))}",
            settings.region,
        )


def pinned_digest_through_cache(settings: Settings) -> Iterator[Finding]:
    serving = settings.serving
    if serving.image_cache.enabled and serving.image_digest:
        yield Finding(
            "serving.image_digest",
            "with serving.image_cache: ECR's pull-through cache imports an image only on a pull "
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


RULES = (
    Rule("image-registry-region", frozenset({"region"}), registry_in_region),
    Rule(
        "pinned-digest-through-cache", frozenset({"serving"}), pinned_digest_through_cache, WARNING
    ),
    Rule("registry-scanning-replaced", frozenset({"serving"}), registry_scanning_replaced, WARNING),
)
