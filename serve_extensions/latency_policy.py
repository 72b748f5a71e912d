"""The latency policy's decisions: observed latency and load per side -> replicas per side.

Pure (no Ray import), so that it is unit-tested and replayed without a cluster
(tests/serve_extensions/test_latency_policy.py, tools/latency_replay.py); the Ray adapter that
Serve's controller calls is latency_autoscaler.py. Prefill is sized to the TTFT objective, decode
to the ITL objective, each from its own observations, and both together fit the GPU budget.

The model of a side (what "needed" below means): a side's latency is a floor (what one request
costs on an idle replica: the prompt's forward pass, one decode step) plus a part that grows in
proportion to the load per DP group (queueing on prefill, batch size on decode; vLLM's ITL
grows about linearly with the batch on the real-engine figures, docs/gpu-bench/
2026-12-02-h200-qwen3-8b.json). With `groups` groups observed at latency L and floor f, the
groups that bring it to `aim` of the objective T are groups * (L - f) / (aim * T - f). The floor
is the lowest latency the side has reported (its latency at the least load seen); a scale-down
is judged without it (all latency as load), the cautious side of the model.

Stability, so that the two sides never chase each other:
- a dead band: scale up only above `scale_up_at` of the objective, down only when the model
  says one group fewer still stays within `aim` of it, below that (so the next decision after
  a scale-down does not scale up);
- down one DP group at a time, up at most `max_step_up` times the groups per decision;
- while a side's replicas are starting (Serve's target above its running replicas) hold it:
  the latency observed is that of fewer replicas than are coming;
- Serve's own delays (upscale_delay_s, downscale_delay_s per side) apply to every decision
  (ray/serve/autoscaling_policy.py _apply_app_level_autoscaling_config, Ray 2.58): they are the
  cool-downs.

Missing inputs (a side that reported fewer than `min_samples` latencies in the look-back window,
or none at all) degrade that side to Serve's queue rule: ongoing requests / target_ongoing_requests
(ray/serve/autoscaling_policy.py _core_replica_queue_length_policy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

SIDES = ("prefill", "decode")

# Reasons, one label value each on the decision metric (latency_autoscaler.py).
OVER = "over_objective"
UNDER = "under_objective"
WITHIN = "within_objective"
STARTING = "replicas_starting"
QUEUE = "queue_fallback"
AT_MAX = "at_max_replicas"
AT_BUDGET = "at_gpu_budget"
REASONS = (OVER, UNDER, WITHIN, STARTING, QUEUE, AT_MAX, AT_BUDGET)


@dataclass(frozen=True)
class Objective:
    """The bound on a percentile of the side's latency, in seconds."""

    percentile: float
    value_s: float


@dataclass(frozen=True)
class SideLimits:
    """A side's bounds in Serve replicas (for a DP side Ray Serve LLM multiplies min/max by
    data_parallel_size: data_parallel/dp_server.py, Ray 2.58), its DP group size (Serve
    replicas per group) and the GPUs of one group."""

    min_replicas: int
    max_replicas: int
    group_size: int
    group_gpus: int
    target_ongoing_requests: float

    @property
    def min_groups(self) -> int:
        return self.min_replicas // self.group_size

    @property
    def max_groups(self) -> int:
        return self.max_replicas // self.group_size


@dataclass(frozen=True)
class SideObservation:
    """What Serve's controller knows of a side at one decision: running replicas, its current
    target, the requests in flight (running and queued in handles), and the latency percentile
    the side's replicas reported over the look-back window with the number of samples behind it
    (None: not reported)."""

    running_replicas: int
    target_replicas: int
    ongoing_requests: float
    latency_s: float | None = None
    samples: int = 0


@dataclass(frozen=True)
class Tuning:
    """Where the policy aims (a share of the objective), from what share it adds replicas (before
    the objective is missed: a new replica takes minutes to serve), how far it moves at once, and
    how many latency samples it needs to trust a percentile."""

    aim: float = 0.7
    scale_up_at: float = 0.9
    max_step_up: float = 2.0
    min_samples: int = 8


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str
    # The latency over the objective (None under the queue fallback): the budget's priority.
    pressure: float | None = None


@dataclass
class Memory:
    """What the policy carries between decisions: each side's latency floor."""

    floor_s: dict[str, float] = field(default_factory=dict)


def decide(
    observations: dict[str, SideObservation],
    limits: dict[str, SideLimits],
    objectives: dict[str, Objective],
    memory: Memory,
    gpu_budget: int | None = None,
    tuning: Tuning = Tuning(),
) -> dict[str, Decision]:
    """Replicas per side for this decision (Serve then applies its delays and bounds)."""
    decisions = {
        side: _side_decision(
            observations[side], limits[side], objectives[side], memory, side, tuning
        )
        for side in observations
    }
    return _within_budget(decisions, limits, gpu_budget)


def _side_decision(
    seen: SideObservation,
    limits: SideLimits,
    objective: Objective,
    memory: Memory,
    side: str,
    tuning: Tuning,
) -> Decision:
    current = _groups(seen.running_replicas, limits)
    target = _groups(seen.target_replicas, limits)
    if seen.latency_s is None or seen.samples < tuning.min_samples or current == 0:
        wanted = math.ceil(
            seen.ongoing_requests / limits.target_ongoing_requests / limits.group_size
        )
        return _bounded(wanted, limits, QUEUE, None)
    latency = seen.latency_s
    floor = min(memory.floor_s.get(side, latency), latency)
    memory.floor_s[side] = floor
    goal = tuning.aim * objective.value_s
    # A floor at or above the aim leaves no room the load may take: treat the latency as all
    # load-driven, so that the side still grows with its latency.
    floor = floor if floor < 0.9 * goal else 0.0
    pressure = latency / objective.value_s
    if target > current:
        return _bounded(target, limits, STARTING, pressure)
    if latency > tuning.scale_up_at * objective.value_s:
        needed = current * (latency - floor) / (goal - floor)
        wanted = max(current + 1, math.ceil(needed))
        wanted = min(wanted, max(current + 1, math.floor(current * tuning.max_step_up)))
        return _bounded(wanted, limits, OVER, pressure)
    # Down without the floor: all of the latency counted as load predicts more growth from one
    # group fewer than the floor would, so a scale-down is never one the next decision undoes.
    if current > 1 and math.ceil(current * latency / goal) < current:
        return _bounded(current - 1, limits, UNDER, pressure)
    return _bounded(current, limits, WITHIN, pressure)


def _groups(replicas: int, limits: SideLimits) -> int:
    """Whole DP groups: a group short of a rank is restarting, and counts as not there."""
    return replicas // limits.group_size


def _bounded(groups: int, limits: SideLimits, reason: str, pressure: float | None) -> Decision:
    # Ray 2.58 rounds a DP side to whole gangs only under a deployment-level policy
    # (GangSchedulingAutoscalingPolicy, wrapped in DeploymentAutoscalingState.register); an
    # application-level policy's decisions are only clipped to the bounds
    # (ApplicationAutoscalingState.get_decision_num_replicas): the whole groups are ours.
    if groups > limits.max_groups:
        groups, reason = limits.max_groups, AT_MAX
    groups = max(groups, limits.min_groups)
    return Decision(groups * limits.group_size, reason, pressure)


def _within_budget(
    decisions: dict[str, Decision], limits: dict[str, SideLimits], gpu_budget: int | None
) -> dict[str, Decision]:
    """Cut the wants to the budget: each side keeps its floor (decode's min_replicas, at least
    one prefill group when prefill wants one: every request passes through prefill), then the
    GPUs left go one group at a time to the side furthest over its objective."""

    def gpus(side: str, replicas: int) -> int:
        return replicas // limits[side].group_size * limits[side].group_gpus

    if gpu_budget is None or sum(gpus(s, d.replicas) for s, d in decisions.items()) <= gpu_budget:
        return decisions
    granted = {
        side: max(limits[side].min_groups, min(1, decision.replicas)) * limits[side].group_size
        for side, decision in decisions.items()
    }
    left = gpu_budget - sum(gpus(side, replicas) for side, replicas in granted.items())
    while True:
        hungry = [
            side
            for side, decision in decisions.items()
            if granted[side] < decision.replicas and limits[side].group_gpus <= left
        ]
        if not hungry:
            break
        side = max(hungry, key=lambda s: (decisions[s].pressure or 0.0, s == "prefill"))
        granted[side] += limits[side].group_size
        left -= limits[side].group_gpus
    return {
        side: decision
        if granted[side] == decision.replicas
        else replace(decision, replicas=granted[side], reason=AT_BUDGET)
        for side, decision in decisions.items()
    }


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) of the samples, nearest rank; None without samples."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]
