"""Pass marks of `pdctl efa-check`: what a healthy EFA path between a prefill and a decode node
must show. Thresholds, not facts: the defaults catch a device that is missing, down or far off its
line rate; tighten them from a baseline taken on nodes you trust (`pdctl efa-check --json`)."""

from __future__ import annotations

from pydantic import Field

from app_config.section import Section


class EfaCheck(Section):
    """Thresholds and bounds of `pdctl efa-check` (docs/pdctl.md, "pdctl efa-check")."""

    min_bandwidth_share: float = Field(
        0.40,
        gt=0,
        le=1,
        description="Each EFA device must reach this share of its line rate (the instance's EFA "
        "bandwidth / its network cards) at the largest ping-pong message. One message in "
        "flight and one endpoint per device reach less than a streaming test, so the default "
        "flags a device that is far off, not one a few percent slow.",
    )
    max_latency_us: float = Field(
        50.0,
        gt=0,
        le=10000,
        description="Each EFA device's ping-pong time per transfer at the smallest message, in "
        "microseconds, must not exceed this.",
    )
    iterations: int = Field(
        100,
        ge=10,
        le=100000,
        description="Ping-pong round trips per message size and device.",
    )
    timeout_seconds: int = Field(
        900,
        ge=60,
        le=7200,
        description="Bound of the whole check: scheduling (a node may have to be added), the "
        "image pull on a fresh node, and the tests; the Jobs are deleted when it passes.",
    )
