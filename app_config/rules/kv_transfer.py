"""How the KV cache moves between the sides."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.rules import WARNING, Rule

if TYPE_CHECKING:
    from app_config.model import Settings


def ucx_on_efa(settings: Settings) -> Iterator[Finding]:
    backend = settings.serving.kv_transfer.backend
    if backend == "UCX":
        yield Finding(
            "serving.kv_transfer.backend",
            "on EFA, UCX silently falls back to a slow path (time to first token of tens of "
            "seconds, no error). Use LIBFABRIC.",
            backend,
        )


RULES = (Rule("ucx-on-efa", frozenset({"serving"}), ucx_on_efa, WARNING, stack="serving"),)
