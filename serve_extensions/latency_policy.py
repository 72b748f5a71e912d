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
is the lowest latency the side has reported (its latency at the least load seen).

A scale-down is judged on the same line, drawn through the floor and now: the floor seen at
load per group x0, the latency L now at x, one group fewer brings x to x * g / (g - 1), and
the line predicts L + (L - f) / (x - x0) * (x * g / (g - 1) - x). With x0 = 0 that is the
scale-up's model; a floor seen under load (x0 > 0) gives a steeper line, more cautious. A floor
seen at more than half of today's load says little of the slope (a percentile's noise over a
small load difference would make it anything): the scale-down then counts all of the latency
as load, f = 0. That was the only rule before, and it could never bring down a side whose
floor is near the aim (decode at 3 replicas, a 10.2 ms step and a 14 ms aim: docs/
verification.md, the second local replay).

The load (`side_load`) is the side's engines' own requests where its replicas report them (the
ENGINE_REQUESTS custom metric, latency_servers.py: every request a replica's vLLM engine holds,
running or waiting in its scheduler), else Serve's requests in flight, the queue rule's own
input. Serve's count is wrong for decode in two ways: Ray Serve LLM's decode server calls
prefill itself (serving_patterns/prefill_decode/pd_server.py PDOrchestratorMixin), so decode's
requests in flight include every prompt's prefill, which its engine never sees; and requests in
flight lag the engine by a routing step (the fourth local replay, where Serve saw only 2 to 12
of decode's 75 sequences per replica, is the extreme: docs/verification.md). A replica whose
last report is older than a look-back (latency_autoscaler.observe leaves it out) is taken at the
mean of those that report; one that has not reported yet (just started) at none (`side_load`).

A scale-up is led by the load, so that the replicas it asks for serve before the measured
percentile breaches (a new replica serves only after Serve's upscale delay and its engine's
start: 60 s + 106 s for decode, in which the third local replay lost four minutes at the turn to
long answers). The same line predicts the latency at the load the side is heading for: its
load now plus its trend (its change per second over the last
`trend_look_backs` look-back periods) times `lead_look_backs` look-back periods,
L + (L - f) / (x - x0) * (x' - x) per group. Where that is above `scale_up_at` of the
objective the side asks for the groups that bring the predicted latency to `aim`, as the
measured one would (`load_rising`). Only a rising load leads,
by more than `lead_min_rise` of today's load and by more than `lead_min_sigmas` standard
deviations of a steady count (`_trend`), on a side already above its aim or whose load rose
past that noise in both halves of the trend's span (`_sustained`), and on a line it can
trust (a floor seen at half of today's load or less, as for the scale-down); without a trend
(the first half of its span), a floor or samples the side decides as before. The gates
are against noise: below the aim a side's requests in flight are few and their look-back
average swings by half in a minute at a steady load (the simulation's prefill, 0.7 to 2 at one
replica), and a lead there added a prefill replica twice for nothing. The noise that passes
them (decode at 2 replicas on the long answers, near the scale-up line) asks for more for a
few seconds, shorter than Serve's upscale delay, so the target does not move (the simulation:
tools/latency_replay.py, docs/verification.md). The scale-down is judged as before.

Stability, so that the two sides never chase each other:
- a dead band: scale up only above `scale_up_at` of the objective, down only when the model
  says one group fewer still stays within `aim` of it, below that (so the next decision after
  a scale-down does not scale up);
- down one DP group at a time, up at most `max_step_up` times the groups per decision;
- not down to a number of groups at which the side was over `scale_up_at` of its objective
  (or at more groups than that) within the last `recall_look_backs` look-back periods
  (`missed_there_recently`): the line predicts the mean of a side's latency, and a percentile
  over a bursty load misses at a number of groups whose mean is within the aim. On the local
  replay's long prompts prefill at 3 replicas sat at 0.6 to 0.7 of its TTFT objective between
  bursts and missed it in the bursts (minutes 3.5, 12 to 15, 22 to 25 on the model alone,
  tools/latency_replay_bursts.py); one group more held them, the line brought it back down
  before the next burst, and a prefill engine takes 238 s to serve again. 20 look-back periods
  (10 minutes at Serve's 30 s) outlast those gaps, and a group more is held only while misses
  keep coming;
- while a side's replicas are starting (Serve's target above its running replicas) hold it:
  the latency observed is that of fewer replicas than are coming;
- Serve's own delays (upscale_delay_s, downscale_delay_s per side) apply to every decision
  (ray/serve/autoscaling_policy.py _apply_app_level_autoscaling_config, Ray 2.58): they are the
  cool-downs.

Missing inputs (a side that reported fewer than `min_samples` latencies in the look-back window,
or none at all) first hold the side at its target: a side under load reports its first samples
only after its requests finish, the replicas' reports reach the controller and fill its
look-back window (Ray 2.58: a replica records every look_back_period_s x 0.2 and pushes every
RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S, 10 s; the controller averages over
look_back_period_s, 30 s: serve/_private/replica.py, constants.py, config.py). Sizing it on its
queue meanwhile is what went wrong for decode: Ray Serve LLM's decode server calls prefill
itself (serving_patterns/prefill_decode/pd_server.py PDOrchestratorMixin), so decode's requests
in flight include every prompt's prefill, and long prompts scaled decode up on prefill's work.
The hold lasts `hold_look_backs` look-back periods from the first decision that saw the side
loaded without samples (2: one window to fill, with the push's 10 s and a stream's own length,
up to about 15 s for 1,500 tokens at 10 ms, inside the second). Past it, or while the side has
no requests at all (an idle side has nothing to wait for), or with no replica running (Serve's
cold start), the side degrades to Serve's queue rule on its load: load /
target_ongoing_requests (ray/serve/autoscaling_policy.py _core_replica_queue_length_policy, whose
input is Serve's requests in flight; the engines' requests where reported, as above). With the
engines' count decode's fallback no longer reads prefill's work, so the hold matters for the
latency it waits for, not for the load.
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
AWAITING = "awaiting_samples"
AT_MAX = "at_max_replicas"
AT_BUDGET = "at_gpu_budget"
RISING = "load_rising"
MISSED_THERE = "missed_there_recently"
REASONS = (
    OVER,
    UNDER,
    WITHIN,
    STARTING,
    QUEUE,
    AWAITING,
    AT_MAX,
    AT_BUDGET,
    RISING,
    MISSED_THERE,
)


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
    (None: not reported), the controller's clock and the side's look_back_period_s (for how
    long missing samples are waited for); and the requests the side's engines hold, summed over
    the `engine_replicas` running replicas whose report of them is fresh (None: none is), and
    how many running replicas have reported them at all, fresh or not (`reporting_replicas`;
    None: not known, taken as every running replica)."""

    running_replicas: int
    target_replicas: int
    ongoing_requests: float
    latency_s: float | None = None
    samples: int = 0
    now_s: float = 0.0
    look_back_s: float = 30.0
    engine_requests: float | None = None
    engine_replicas: int = 0
    reporting_replicas: int | None = None


@dataclass(frozen=True)
class Tuning:
    """Where the policy aims (a share of the objective), from what share it adds replicas (before
    the objective is missed: a new replica takes minutes to serve), how far it moves at once, and
    how many latency samples it needs to trust a percentile, and for how many look-back periods
    a loaded side waits for them before it degrades to the queue rule, and how many look-back
    periods ahead a rising load is projected (about the time a scale-up takes to serve: Serve's
    upscale delay and an engine's start, 60 s + 106 s for decode at the defaults), and for how
    many look-back periods a side is not brought back down to where it missed (module
    docstring, stability)."""

    aim: float = 0.7
    scale_up_at: float = 0.9
    max_step_up: float = 2.0
    min_samples: int = 8
    hold_look_backs: float = 2.0
    lead_look_backs: float = 4.0
    lead_min_rise: float = 0.25
    trend_look_backs: float = 2.0
    lead_min_sigmas: float = 2.0
    recall_look_backs: float = 20.0


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str
    # The latency over the objective (None under the queue fallback): the budget's priority.
    pressure: float | None = None


@dataclass
class Memory:
    """What the policy carries between decisions: each side's latency floor and the requests in
    flight per group when it was seen, since when a loaded side has been without samples, and
    the side's requests in flight at each decision over the trend's span (`_trend`), and when
    it was last over `scale_up_at` of its objective at each number of groups (`_missed_there`)."""

    floor_s: dict[str, float] = field(default_factory=dict)
    floor_load: dict[str, float] = field(default_factory=dict)
    missing_since_s: dict[str, float] = field(default_factory=dict)
    loads: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    missed_s: dict[str, dict[int, float]] = field(default_factory=dict)


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
    total = side_load(seen)
    trend = _trend(
        seen.now_s,
        total,
        memory,
        side,
        tuning.trend_look_backs * seen.look_back_s,
        tuning.lead_min_sigmas,
    )
    if seen.latency_s is None or seen.samples < tuning.min_samples or current == 0:
        if _awaiting_samples(seen, total, current, memory, side, tuning):
            return _bounded(target, limits, AWAITING, None)
        wanted = math.ceil(total / limits.target_ongoing_requests / limits.group_size)
        return _bounded(wanted, limits, QUEUE, None)
    memory.missing_since_s.pop(side, None)
    latency = seen.latency_s
    load_per_group = total / current
    if latency <= memory.floor_s.get(side, latency):
        memory.floor_s[side], memory.floor_load[side] = latency, load_per_group
    floor, floor_load = memory.floor_s[side], memory.floor_load[side]
    goal = tuning.aim * objective.value_s
    # A floor at or above the aim leaves no room the load may take: treat the latency as all
    # load-driven, so that the side still grows with its latency.
    floor = floor if floor < 0.9 * goal else 0.0
    pressure = latency / objective.value_s
    if latency > tuning.scale_up_at * objective.value_s:
        memory.missed_s.setdefault(side, {})[current] = seen.now_s
    if target > current:
        return _bounded(target, limits, STARTING, pressure)
    if latency > tuning.scale_up_at * objective.value_s:
        return _bounded(_grown(current, latency, floor, goal, tuning), limits, OVER, pressure)
    ahead = load_per_group + trend * tuning.lead_look_backs * seen.look_back_s / current
    predicted = _latency_at(ahead, latency, load_per_group, floor, floor_load)
    # Above the aim any rise past the noise gates leads; below it only a sustained one
    # (`_sustained`): decode sat at 0.6 of its objective until the turn to long answers on the
    # seventh local run, and crossed the aim and the objective within two minutes.
    rising = ahead >= (1 + tuning.lead_min_rise) * load_per_group and (
        latency > goal or _sustained(memory.loads[side], tuning.lead_min_sigmas)
    )
    if rising and predicted > tuning.scale_up_at * objective.value_s:
        return _bounded(_grown(current, predicted, floor, goal, tuning), limits, RISING, pressure)
    # Down on the line through the floor and now (module docstring): one group fewer only if it
    # predicts the latency stays within the aim, below scale_up_at, so that the next decision
    # does not undo it; and not where the side missed lately (`_missed_there`).
    if (
        current > 1
        and _one_fewer_latency(latency, load_per_group, floor, floor_load, current) <= goal
    ):
        if _missed_there(memory, side, current - 1, seen.now_s, tuning, seen.look_back_s):
            return _bounded(current, limits, MISSED_THERE, pressure)
        return _bounded(current - 1, limits, UNDER, pressure)
    return _bounded(current, limits, WITHIN, pressure)


def _missed_there(
    memory: Memory, side: str, groups: int, now_s: float, tuning: Tuning, look_back_s: float
) -> bool:
    """Whether the side was over `scale_up_at` of its objective with `groups` groups serving,
    or more, within the last `recall_look_backs` look-back periods (module docstring,
    stability): a miss at more groups says fewer would miss too."""
    since = now_s - tuning.recall_look_backs * look_back_s
    return any(
        at_s >= since for count, at_s in memory.missed_s.get(side, {}).items() if count >= groups
    )


def _grown(current: int, latency: float, floor: float, goal: float, tuning: Tuning) -> int:
    """The groups that bring `latency` (measured, or predicted by the lead) to the goal on the
    model (module docstring): at least one more, at most max_step_up times."""
    wanted = max(current + 1, math.ceil(current * (latency - floor) / (goal - floor)))
    return min(wanted, max(current + 1, math.floor(current * tuning.max_step_up)))


def _one_fewer_latency(
    latency: float, load: float, floor: float, floor_load: float, groups: int
) -> float:
    """The latency the side's line predicts with one group fewer carrying the same requests:
    through (floor_load, floor) and (load, latency) where the floor was seen at half the load
    or less, else through (0, 0), all latency as load. With no request in flight one group
    fewer carries nothing more: the latency is today's. A side with latency samples reads 0
    where its requests are short and few: the engines' count is sampled every look_back_s x
    0.2 (Serve's record interval), and prefill at 0.6 requests per replica read 0 in every
    point of a window while it served (the simulation), which held it at 2 replicas."""
    if load <= 0:
        return latency
    slope = _slope(latency, load, floor, floor_load)
    return latency + (latency / load if slope is None else slope) * load / (groups - 1)


def _latency_at(
    load_ahead: float, latency: float, load: float, floor: float, floor_load: float
) -> float:
    """The latency the line through the floor and now predicts at another load per group; the
    latency now where the line is not to be trusted (no floor, or one seen at more than half of
    today's load: the module docstring), so that the side decides on what it measured."""
    slope = _slope(latency, load, floor, floor_load)
    return latency if slope is None else latency + slope * (load_ahead - load)


def _slope(latency: float, load: float, floor: float, floor_load: float) -> float | None:
    """The slope of the line through the floor and now, latency per request in flight per group;
    None where it is not to be trusted: no floor, or one seen at more than half of today's load
    (the module docstring)."""
    if floor <= 0 or load <= 0 or floor_load > load / 2:
        return None
    return (latency - floor) / (load - floor_load)


def side_load(seen: SideObservation) -> float:
    """The side's load, in requests: its engines' own (the mean of the replicas whose report is
    fresh, for every running replica that has reported at all) where any reports them, else
    Serve's requests in flight (module docstring). A replica that has not reported yet has just
    started and carries next to nothing; the others' look-back averages still hold the share it
    is taking over. Counted at their mean, it doubled decode's load as its second replica came
    up on the tenth local replay (29 requests on the one reporting engine read as 58, and the
    lead asked for 4 replicas: docs/verification.md)."""
    if seen.engine_requests is None or seen.engine_replicas <= 0:
        return seen.ongoing_requests
    reporting = (
        seen.running_replicas
        if seen.reporting_replicas is None
        else min(seen.running_replicas, seen.reporting_replicas)
    )
    return seen.engine_requests / seen.engine_replicas * max(reporting, seen.engine_replicas)


def _trend(
    now_s: float, total: float, memory: Memory, side: str, span_s: float, min_sigmas: float
) -> float:
    """The side's load, change per second over the last `span_s` (0 until half of it has been
    seen, and 0 for a change within `min_sigmas` standard deviations of a steady load). Serve's
    count and the engines' are look-back averages, and their change over one look-back is
    mostly noise at a steady Poisson load (the simulation's decode, 130 to 175 requests at 2
    replicas on the long answers). The requests in flight at a steady Poisson load are Poisson
    (decode serves every arrival at once: M/G/infinity; prefill's queue is near it at low
    utilisation), so their standard deviation is the square root of their mean: where the count
    is small, a change of a quarter is that noise (prefill's 2 requests at 3 replicas read 3.4
    a minute later in the simulation with the engines' count, sampled every 6 s as Serve's
    replicas record, and the lead asked for 6 replicas for nothing)."""
    history = memory.loads.setdefault(side, [])
    history.append((now_s, total))
    while history[0][0] < now_s - span_s:
        history.pop(0)
    since, then = history[0]
    if now_s - since < span_s / 2 or abs(total - then) < min_sigmas * math.sqrt(max(then, 1.0)):
        return 0.0
    return (total - then) / (now_s - since)


def _sustained(history: list[tuple[float, float]], min_sigmas: float) -> bool:
    """Whether the load rose in both halves of the trend's span (`history`, as `_trend` keeps
    it), each time by more than `min_sigmas` standard deviations of a steady count (as in
    `_trend`): a load that keeps rising, not one step or one Poisson swing. A side below its
    aim leads only on such a rise. Below the aim a side's count is small and swings: with any
    rise leading there, the simulation's prefill (2 to 5 requests at 3 replicas) was led to 6
    replicas at 948 s and 1,110 s for nothing, 12,901 prefill replica-seconds instead of 8,182
    (tools/latency_replay.py --latency-from 3:1); with this rule, none. A sustained rise is what
    the turn to long answers is: on the seventh local run decode at one replica held its ITL at
    0.56 to 0.62 of the objective until the turn (the clients' p95, minutes 55 to 59), then 0.75
    and 1.02 in minutes 60 and 61; no lead acted, and the policy first asked for a second
    replica on the measured ITL (0.93 of the objective, 96 requests on its engine)."""
    if len(history) < 3:
        return False
    (start_s, first), (now_s, last) = history[0], history[-1]
    middle = next(load for at_s, load in history if at_s >= (start_s + now_s) / 2)

    def rose(before: float, after: float) -> bool:
        return after - before > min_sigmas * math.sqrt(max(before, 1.0))

    return rose(first, middle) and rose(middle, last)


def _awaiting_samples(
    seen: SideObservation, total: float, current: int, memory: Memory, side: str, tuning: Tuning
) -> bool:
    """Whether a side without enough samples is held (True) rather than sized on its queue: it
    has replicas serving and load (`total`), and has waited less than hold_look_backs
    look-back periods since the first decision that saw it so."""
    if current == 0 or total <= 0:
        memory.missing_since_s.pop(side, None)
        return False
    since = memory.missing_since_s.setdefault(side, seen.now_s)
    return seen.now_s - since < tuning.hold_look_backs * seen.look_back_s


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
