"""Pass marks and time bounds of `pdctl efa-check`: what a healthy EFA path between a prefill and
a decode node must show, and how long each part of the check may take. The marks are
thresholds, not facts: the defaults catch a device that is missing, down or far off its line
rate; tighten them from a baseline taken on nodes you trust (`pdctl efa-check --json`)."""

from __future__ import annotations

from pydantic import Field

from app_config.section import Section

# A 19.3 GB image took 4 min 44 s to pull from ECR on a fresh node (AWS Machine Learning blog,
# "Reducing container cold start times using SOCI index on DLAMI and DLC"); the Ray LLM image is
# 20+ GB. Twice that covers a larger image and a busy registry.
IMAGE_PULL_SECONDS = 600
# The pod's start, fi_info, the wait for the partner's name in DNS (CoreDNS serves a headless
# Service's ready pods within seconds, a cached "no such name" up to 30 s) and the first pair's
# longer window (pdctl/efa_jobs.py FIRST_PAIR_EXTRA_SECONDS).
START_SECONDS = 120


def device_pairs(prefill_cards: int, decode_cards: int) -> int:
    """Pairs the check runs: every EFA device of both nodes takes part. Any EFA device reaches
    any device of a node in its peer group, so the side with fewer devices (p5en's 16 against
    p5's 32) cycles through its devices: pair k is device k mod n on each side."""
    return max(prefill_cards, decode_cards)


class EfaCheck(Section):
    """Thresholds and bounds of `pdctl efa-check` (docs/pdctl.md, "pdctl efa-check")."""

    min_bandwidth_share: float = Field(
        0.40,
        gt=0,
        le=1,
        description="Each EFA device pair must reach this share of its line rate (the slower "
        "device's: the instance's EFA bandwidth / its network cards) at the largest ping-pong "
        "message (6 MiB on the efa fabric). One message in flight and one endpoint per device "
        "reach less than a streaming test, so the default flags a device that is far off, not "
        "one a few percent slow.",
    )
    max_latency_us: float = Field(
        50.0,
        gt=0,
        le=10000,
        description="Each EFA device pair's ping-pong time per transfer at the smallest message "
        "(0 bytes), in microseconds, must not exceed this.",
    )
    iterations: int = Field(
        100,
        ge=10,
        le=100000,
        description="Ping-pong round trips per message size and device pair.",
    )
    pair_seconds: int = Field(
        30,
        ge=10,
        le=600,
        description="Bound of one device pair's ping-pong (fi_pingpong waits for completions "
        "without a timeout of its own): a pair that has not finished by then counts as hung "
        "and the next pair starts. 46 message sizes x the iterations take a few seconds on a "
        "healthy pair.",
    )
    timeout_seconds: int | None = Field(
        None,
        ge=60,
        le=7200,
        description="Bound of the whole check; the Jobs are deleted when it passes. Unset: "
        "one node join (cluster.node_autoscaler.max_node_provision_minutes, after which the "
        "autoscaler gives up on the node anyway; both sides scale up at the same time) + "
        f"{IMAGE_PULL_SECONDS} s for the image pull on a fresh node + {START_SECONDS} s to "
        "start + pair_seconds for every device pair.",
    )

    def test_seconds(self, pairs: int) -> int:
        """What the pods need once both run: start, then every pair to its bound."""
        return START_SECONDS + pairs * self.pair_seconds

    def deadline_seconds(self, pairs: int, node_join_minutes: int) -> int:
        if self.timeout_seconds is not None:
            return self.timeout_seconds
        return node_join_minutes * 60 + IMAGE_PULL_SECONDS + self.test_seconds(pairs)
