"""How the application sizes prefill against decode: Serve's queue policy per side, or the app's
latency policy, which sets both sides together from TTFT and ITL objectives.

The relations to other settings (objectives required for `latency`, the GPU budget against the
node groups, the TTFT objective against stream batching) are rules:
app_config/rules/scaling.py. The policy itself is serve_extensions/latency_policy.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app_config.section import Section

# Percentiles an objective may name. Below the median an objective says nothing about the tail
# users notice; above 99.9 the few requests of a look-back window (Serve's look_back_period_s,
# 30 s by default) cannot estimate it.
PERCENTILE_MIN, PERCENTILE_MAX = 50.0, 99.9


class LatencyObjective(Section):
    """A latency the application should keep: `percentile` of the requests finish the phase in
    at most `value_ms`, measured where the client measures it (`pdctl bench` reports the same
    percentiles)."""

    percentile: float = Field(
        95,
        ge=PERCENTILE_MIN,
        le=PERCENTILE_MAX,
        description=f"Which percentile of the requests the objective bounds "
        f"({PERCENTILE_MIN:g}-{PERCENTILE_MAX:g}).",
    )
    value_ms: float = Field(
        gt=0, le=600_000, description="The bound, in milliseconds, on that percentile."
    )


class Scaling(Section):
    """How Serve's autoscaler turns load into replicas for the two sides."""

    policy: Literal["queue", "latency"] = Field(
        "queue",
        description="'queue': each side scales on its own requests in flight per replica "
        "(serving.<side>.autoscaling.target_ongoing_requests; Ray Serve's default policy). "
        "'latency': the app's application-level policy (serve_extensions/latency_policy.py) "
        "sets both sides' replicas together so that the TTFT and ITL objectives hold, within "
        "min/max_replicas, whole DP groups and gpu_budget; it keeps each side's upscale and "
        "downscale delays as cool-downs and falls back to the queue rule for a side whose "
        "latency it cannot read (docs/operating.md, 'Scaling to latency objectives').",
    )
    ttft: LatencyObjective | None = Field(
        None,
        description="Time to first token objective: what prefill's replicas (and the hand-off) "
        "must keep. Required with policy 'latency'.",
    )
    itl: LatencyObjective | None = Field(
        None,
        description="Inter-token latency objective: what decode's replicas must keep. Required "
        "with policy 'latency'.",
    )
    gpu_budget: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="GPUs both sides together may hold under policy 'latency' (a shared "
        "reservation, a quota); when the two sides want more, the side further out of its "
        "objective gets the GPUs. Unset: each side's own bound (max_replicas, which fits its "
        "node group's max_size).",
    )
