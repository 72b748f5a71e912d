"""Replay a workload whose prompt/answer mix shifts (long prompts, then long answers) against a
simulation of Ray Serve 2.58's autoscaling loop, for three ways of sizing prefill and decode:
Serve's queue policy (today's settings), the best fixed ratio found by search, and the app's
latency policy. Prints and writes the share of minutes in which both objectives held and the
replica-seconds each used (docs/verification.md, "Latency policy by trace replay").

    .venv/bin/python -m tools.latency_replay --write docs/latency-replay/2026-12-02-replay.json

What runs as in Serve (the installed Ray 2.58, called here with a virtual clock):
- the decisions: Serve's default policy wrapped as for a deployment (ray/serve/
  autoscaling_policy.py replica_queue_length_autoscaling_policy, _apply_autoscaling_config),
  and the app's LatencyObjectivePolicy wrapped as for an application
  (_apply_app_level_autoscaling_config): scaling factors, cold start and the upscale/downscale
  delays, measured in wall-clock time (_apply_delay_logic), are Ray's code;
- bounds: ceil, then min/max_replicas (_private/autoscaling_state.py apply_bounds and
  ApplicationAutoscalingState.get_decision_num_replicas).
What is modelled (each rule from the Ray 2.58 source):
- the control loop decides every DECISION_S; Serve's runs every 0.1 s
  (_private/constants.py CONTROL_LOOP_INTERVAL_S), and its delays are wall-clock, so deciding
  once a second moves the end of a delay by at most a second;
- replicas push metrics every 10 s (constants.py
  RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S), and the controller averages them over
  look_back_period_s, 30 s (config.py AutoscalingConfig); total_num_requests is the average of
  the requests in flight (running and queued) over that window;
- each replica's custom metrics are its latency percentile, its sample count and its engine's
  requests (serve_extensions/latency_servers.py), pushed with the rest and averaged per replica
  over the window (aggregated_metrics; the engine's requests recorded every RECORD_S, as Serve's
  replica records its metrics, and seen once pushed); the engine's requests are prefill's
  prompts queued or in their forward pass on it, and decode's running sequences with its share
  of those waiting for a decode slot (vLLM's engine would queue them as waiting requests:
  `Cluster.engine_requests`);
- a new replica serves after its engine starts (STARTUP_S, the real engines' figures); a
  removed replica stops taking requests and is counted until its requests finish (Serve's
  graceful shutdown); requests go to the replica with the shorter queue (Serve's power of two
  choices, idealised).
The engines follow a model fitted to docs/gpu-bench/2026-12-02-h200-qwen3-8b.json (`fit()`).
Node start-up is not modelled: replicas start on nodes that are there (the policy cannot see
node start-up either: docs/operating.md).
"""

from __future__ import annotations

import argparse
import datetime
import heapq
import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serve_extensions.latency_autoscaler import (
    ENGINE_REQUESTS_METRIC,
    LATENCY_METRIC,
    SAMPLES_METRIC,
    LatencyObjectivePolicy,
)
from serve_extensions.latency_policy import percentile

BENCH = Path(__file__).resolve().parents[1] / "docs" / "gpu-bench" / "2026-12-02-h200-qwen3-8b.json"
DECISION_S = 1.0
STEP_S = 0.25
PUSH_S = 10.0
# A replica records its metrics every look_back_period_s x 0.2 (at most metrics_interval_s,
# 10 s) and pushes what it recorded every PUSH_S (Ray 2.58 _private/replica.py
# start_metrics_pusher, constants.py RAY_SERVE_AUTOSCALING_METRIC_RECORD_INTERVAL_FACTOR).
RECORD_S = 30.0 * 0.2
LOOK_BACK_S = 30.0
# Engine healthy after start, real engines (docs/gpu-bench/2026-12-02-h200-qwen3-8b.json startup)
STARTUP_S = {"prefill": 238.0, "decode": 106.0}
# vLLM 0.26 default max_num_seqs for the OpenAI server on a GPU of 70 GiB or more
# (vllm/engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args)
MAX_NUM_SEQS = 1024
# KV hand-off per prompt token over p5's EFA: Qwen3-8B's 147,456 bytes of KV per token at 70%
# of 3,200 Gbps (the figure pdctl plan predicts, docs/gpu-bench notes)
HANDOFF_S_PER_TOKEN = 147_456 / (0.7 * 3200e9 / 8)
WARM_UP_S = 600.0
WARM_START = {"prefill": 3, "decode": 1}
SIDES = ("prefill", "decode")


@dataclass(frozen=True)
class EngineModel:
    """Prefill: a FIFO server of `prefill_tokens_per_s` after `step_s`; decode: every running
    sequence gets a token per step of `step_s + per_seq_s x running` seconds."""

    step_s: float
    per_seq_s: float
    prefill_tokens_per_s: float

    def itl(self, running: int) -> float:
        return self.step_s + self.per_seq_s * running


def fit(bench_path: Path = BENCH) -> tuple[EngineModel, dict[str, Any]]:
    """Least squares of median ITL against concurrency on the aggregated engine (random 1024 in
    / 128 out; at up to 256 streams every stream is a running sequence), and the prefill rate
    from TTFT at one stream less one decode step (an idle engine: prompt forward pass + first
    token)."""
    points = json.loads(bench_path.read_text())["points"]["aggregated"]["random"]
    xs = [int(c) for c in points]
    ys = [points[c]["median_itl_ms"] / 1000 for c in points]
    n, mean_x, mean_y = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    step = mean_y - slope * mean_x
    ttft_1 = points["1"]["median_ttft_ms"] / 1000
    prefill_rate = 1024 / (ttft_1 - step)
    residuals = [y - (step + slope * x) for x, y in zip(xs, ys, strict=True)]
    return EngineModel(step, slope, prefill_rate), {
        "source": str(bench_path.relative_to(bench_path.parents[2])),
        "decode_itl_s": f"{step * 1000:.3f} ms + {slope * 1000:.4f} ms x running sequences",
        "decode_points": {str(x): round(y * 1000, 3) for x, y in zip(xs, ys, strict=True)},
        "decode_max_residual_ms": round(max(abs(r) for r in residuals) * 1000, 3),
        "prefill_tokens_per_s": round(prefill_rate),
        "prefill_from": "1024 tokens / (median TTFT at 1 stream - the decode step)",
        "points_used": n,
    }


# ---- workload


@dataclass(frozen=True)
class Phase:
    """From `start_s`: Poisson arrivals at `rate` per second, prompt and answer lengths
    log-normal around their means (sigma 0.5)."""

    start_s: float
    rate: float
    prompt_tokens: int
    answer_tokens: int


PHASES = (
    Phase(0, 12.0, 6000, 100),  # long prompts, short answers: retrieval / summarising
    Phase(1800, 12.0, 2000, 400),  # mixed
    Phase(3600, 12.0, 300, 1500),  # short prompts, long answers: generation / reasoning
)
DURATION_S = 5400.0
BLEND_S = 180.0


@dataclass
class Request:
    arrival: float
    prompt: int
    answer: int
    prefill_done: float = 0.0
    ttft: float = 0.0
    stalled: bool = False


def workload(seed: int = 7) -> list[Request]:
    rng = random.Random(seed)

    def mean_at(t: float) -> tuple[float, float, float]:
        current = [p for p in PHASES if p.start_s <= t][-1]
        index = PHASES.index(current)
        if index and t - current.start_s < BLEND_S:  # a three-minute blend between phases
            before, w = PHASES[index - 1], (t - current.start_s) / BLEND_S
            return tuple(  # type: ignore[return-value]
                (1 - w) * a + w * b
                for a, b in (
                    (before.rate, current.rate),
                    (before.prompt_tokens, current.prompt_tokens),
                    (before.answer_tokens, current.answer_tokens),
                )
            )
        return current.rate, current.prompt_tokens, current.answer_tokens

    requests, t = [], 0.0
    while True:
        rate, prompt, answer = mean_at(t)
        t += rng.expovariate(rate)
        if t >= DURATION_S:
            return requests
        sigma = 0.5
        requests.append(
            Request(
                t,
                max(16, round(rng.lognormvariate(math.log(prompt) - sigma**2 / 2, sigma))),
                max(4, round(rng.lognormvariate(math.log(answer) - sigma**2 / 2, sigma))),
            )
        )


# ---- the cluster


@dataclass
class Replica:
    side: str
    started: float
    ready_at: float
    stopping: bool = False
    free_at: float = 0.0  # prefill: when its queue empties
    # decode: (the clock value at which it is done, its arrival, the request); the clock counts
    # the tokens each running sequence has been given
    running: list[tuple[float, float, int, Request]] = field(default_factory=list)
    clock: float = 0.0
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (t, value, weight)
    reports: list[tuple[float, float | None, int]] = field(default_factory=list)
    # the engine's requests (t, requests): recorded every RECORD_S, seen once pushed
    engine_recorded: list[tuple[float, float]] = field(default_factory=list)
    engine_reports: list[tuple[float, float]] = field(default_factory=list)
    gone_at: float | None = None

    def ready(self, now: float) -> bool:
        return now >= self.ready_at and not self.stopping


@dataclass(frozen=True)
class Objectives:
    ttft_s: float
    itl_s: float
    percentile: float


# The objectives every replay scores against (this simulation and the local Ray's,
# latency_replay_scale.py): TTFT p95 800 ms, ITL p95 10 ms.
OBJECTIVES = Objectives(ttft_s=0.8, itl_s=0.010, percentile=95)


class Cluster:
    def __init__(
        self,
        model: EngineModel,
        initial: dict[str, int],
        startup_s: dict[str, float] = STARTUP_S,
    ) -> None:
        self.model = model
        self.startup_s = startup_s
        self.replicas: dict[str, list[Replica]] = {side: [] for side in SIDES}
        for side, count in initial.items():
            for _ in range(count):
                self.replicas[side].append(Replica(side, 0.0, 0.0))
        self.waiting: list[Request] = []  # prefill done, no decode slot yet
        self.prefilling: list[tuple[float, Request, Replica]] = []
        self.in_flight_series: dict[str, list[tuple[float, float]]] = {s: [] for s in SIDES}
        self.owner: dict[int, Replica] = {}  # request -> the prefill replica that computed it
        self.itl_by_minute: dict[int, list[tuple[float, float]]] = {}

    def live(self, side: str) -> list[Replica]:
        return [r for r in self.replicas[side] if r.gone_at is None]

    def ready(self, side: str, now: float) -> list[Replica]:
        return [r for r in self.live(side) if r.ready(now)]

    def scale(self, side: str, wanted: int, now: float) -> None:
        live = [r for r in self.live(side) if not r.stopping]
        for _ in range(wanted - len(live)):
            self.replicas[side].append(Replica(side, now, now + self.startup_s[side], free_at=now))
        if wanted < len(live):
            # Serve stops the replicas not yet serving first, then the least loaded
            victims = sorted(live, key=lambda r: (r.ready(now), self._load(r, now)))
            for replica in victims[: len(live) - wanted]:
                replica.stopping = True

    def _load(self, replica: Replica, now: float) -> float:
        if replica.side == "prefill":
            return max(0.0, replica.free_at - now)
        return len(replica.running)

    def arrive(self, request: Request, now: float) -> None:
        ready = self.ready("prefill", now)
        if not ready:
            self.prefilling.append((math.inf, request, None))  # type: ignore[arg-type]
            return
        replica = min(ready, key=lambda r: r.free_at)  # the shorter queue (Serve's routing)
        self._prefill_on(replica, request, request.arrival)

    def _prefill_on(self, replica: Replica, request: Request, since: float) -> None:
        """Queued behind the replica's earlier prompts from `since`: the request's arrival when
        it was placed on arrival (event times stay exact within a step), else the step's time."""
        start = max(since, replica.free_at)
        replica.free_at = (
            start + self.model.step_s + request.prompt / self.model.prefill_tokens_per_s
        )
        request.prefill_done = replica.free_at + request.prompt * HANDOFF_S_PER_TOKEN
        self.prefilling.append((request.prefill_done, request, replica))
        self.owner[id(request)] = replica

    def step(self, now: float, dt: float, done: list[Request]) -> None:
        # requests waiting for a prefill replica (none ready): place them once one is
        ready_prefill = self.ready("prefill", now)
        queued = [item for item in self.prefilling if item[2] is None]
        if queued and ready_prefill:
            self.prefilling = [item for item in self.prefilling if item[2] is not None]
            for _, request, _ in queued:
                self._prefill_on(min(ready_prefill, key=lambda r: r.free_at), request, now)
        # prefill finished -> decode
        finished = [item for item in self.prefilling if item[0] <= now]
        self.prefilling = [item for item in self.prefilling if item[0] > now]
        self.waiting.extend(request for _, request, _ in finished)
        decode_ready = self.ready("decode", now)
        still = []
        for request in self.waiting:
            open_ = [r for r in decode_ready if len(r.running) < MAX_NUM_SEQS]
            if not open_:
                request.stalled = True
                still.append(request)
                continue
            replica = min(open_, key=lambda r: len(r.running))
            itl = self.model.itl(len(replica.running) + 1)
            # admitted when its KV arrived, unless it waited for a free decode slot
            admitted = request.prefill_done if not request.stalled else now
            request.ttft = admitted + itl - request.arrival
            heapq.heappush(
                replica.running,
                (replica.clock + request.answer, request.arrival, id(request), request),
            )
            prefill_side = self.owner.pop(id(request), None)
            if prefill_side is not None:
                prefill_side.samples.append((now, request.ttft, 1.0))
        self.waiting = still
        # decode steps
        for replica in self.live("decode"):
            if not replica.running:
                continue
            itl = self.model.itl(len(replica.running))
            tokens = dt / itl
            replica.samples.append((now, itl, tokens * len(replica.running)))
            self.itl_by_minute.setdefault(int(now // 60), []).append(
                (itl, tokens * len(replica.running))
            )
            replica.clock += tokens
            while replica.running and replica.running[0][0] <= replica.clock:
                done.append(heapq.heappop(replica.running)[3])
        for side in SIDES:
            for replica in self.live(side):
                if replica.stopping and self._load(replica, now) == 0 and not replica.running:
                    replica.gone_at = now
        in_flight = {
            "prefill": float(len(self.prefilling)),
            "decode": float(sum(len(r.running) for r in self.live("decode")) + len(self.waiting)),
        }
        for side, value in in_flight.items():
            series = self.in_flight_series[side]
            series.append((now, value))
            while series and series[0][0] <= now - LOOK_BACK_S:
                series.pop(0)

    def engine_requests(self, replica: Replica, now: float) -> float:
        """The requests the replica's engine holds: prefill's prompts not yet through their
        forward pass on it, decode's running sequences and its share of those waiting."""
        if replica.side == "prefill":
            return float(
                sum(
                    1
                    for _, request, owner in self.prefilling
                    if owner is replica
                    and request.prefill_done - request.prompt * HANDOFF_S_PER_TOKEN > now
                )
            )
        ready = self.ready("decode", now)
        waiting = len(self.waiting) / len(ready) if replica in ready else 0.0
        return len(replica.running) + waiting

    def record_metrics(self, now: float) -> None:
        for side in SIDES:
            for replica in self.live(side):
                replica.engine_recorded.append((now, self.engine_requests(replica, now)))

    def push_metrics(self, now: float, q: float) -> None:
        for side in SIDES:
            for replica in self.live(side):
                replica.engine_reports = [
                    r
                    for r in replica.engine_reports + replica.engine_recorded
                    if now - LOOK_BACK_S < r[0]
                ]
                replica.engine_recorded = []
                window = [(v, w) for t, v, w in replica.samples if now - PUSH_S < t <= now]
                value = weighted_percentile(window, q)
                replica.reports.append((now, value, len(window)))
                replica.reports = [r for r in replica.reports if now - LOOK_BACK_S < r[0]]
                replica.samples = [s for s in replica.samples if now - PUSH_S < s[0]]

    def replica_seconds(self, now: float) -> dict[str, float]:
        return {
            side: sum(
                (r.gone_at if r.gone_at is not None else now) - r.started
                for r in self.replicas[side]
            )
            for side in SIDES
        }


def weighted_percentile(samples: list[tuple[float, float]], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    total = sum(w for _, w in ordered)
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= q / 100 * total:
            return value
    return ordered[-1][0]


# ---- Serve's loop around a policy


class Controller:
    """Builds each deployment's AutoscalingContext as Serve 2.58's controller would and runs the
    wrapped policy (Ray's code) under a virtual clock."""

    def __init__(
        self,
        policy: str,
        settings: dict[str, Any],
        objectives: Objectives,
        tuning: dict[str, Any] | None = None,
    ) -> None:
        import ray.serve.autoscaling_policy as serve_policy
        from ray.serve._private.common import DeploymentID
        from ray.serve.config import AutoscalingConfig

        self._serve_policy = serve_policy
        self.policy = policy
        self.ids = {
            "prefill": DeploymentID(name="Prefill:qwen", app_name="pd"),
            "decode": DeploymentID(name="Decode:qwen", app_name="pd"),
        }
        self.configs = {
            side: AutoscalingConfig(
                min_replicas=settings[side]["min_replicas"],
                max_replicas=settings[side]["max_replicas"],
                target_ongoing_requests=settings[side]["target_ongoing_requests"],
                upscale_delay_s=settings[side]["upscale_delay_s"],
                downscale_delay_s=settings[side]["downscale_delay_s"],
                look_back_period_s=LOOK_BACK_S,
            )
            for side in SIDES
        }
        self.states: dict[Any, dict] = {self.ids[side]: {} for side in SIDES}
        if policy == "latency":
            self.wrapped = serve_policy._apply_app_level_autoscaling_config(
                LatencyObjectivePolicy(
                    objectives={
                        "prefill": {
                            "percentile": objectives.percentile,
                            "value_ms": objectives.ttft_s * 1000,
                        },
                        "decode": {
                            "percentile": objectives.percentile,
                            "value_ms": objectives.itl_s * 1000,
                        },
                    },
                    limits={
                        side: {
                            "min_replicas": settings[side]["min_replicas"],
                            "max_replicas": settings[side]["max_replicas"],
                            "group_size": 1,
                            "group_gpus": 8,
                            "target_ongoing_requests": settings[side]["target_ongoing_requests"],
                        }
                        for side in SIDES
                    },
                    gpu_budget=settings.get("gpu_budget"),
                    tuning=tuning,
                )
            )
        else:
            self.wrapped = {
                side: serve_policy._apply_autoscaling_config(
                    serve_policy.replica_queue_length_autoscaling_policy
                )
                for side in SIDES
            }
        self.targets = {side: settings[side]["initial"] for side in SIDES}
        self.decisions: list[dict[str, Any]] = []

    def _context(self, side: str, cluster: Cluster, now: float) -> Any:
        from ray.serve._private.common import ReplicaID
        from ray.serve.config import AutoscalingContext

        running = cluster.ready(side, now)
        ids = [ReplicaID(str(id(r)), self.ids[side]) for r in running]
        series = [v for t, v in cluster.in_flight_series[side] if now - LOOK_BACK_S < t <= now]
        metrics: dict[str, dict[Any, float]] = {
            LATENCY_METRIC[side]: {},
            SAMPLES_METRIC: {},
            ENGINE_REQUESTS_METRIC: {},
        }
        for replica_id, replica in zip(ids, running, strict=True):
            engine = [n for t, n in replica.engine_reports if now - LOOK_BACK_S < t <= now]
            if engine:
                metrics[ENGINE_REQUESTS_METRIC][replica_id] = sum(engine) / len(engine)
            window = [(v, n) for t, v, n in replica.reports if now - LOOK_BACK_S < t <= now]
            values = [v for v, _ in window if v is not None]
            if values:
                metrics[LATENCY_METRIC[side]][replica_id] = sum(values) / len(values)
            metrics[SAMPLES_METRIC][replica_id] = sum(n for _, n in window) / max(1, len(window))
        config = self.configs[side]
        return AutoscalingContext(
            deployment_id=self.ids[side],
            deployment_name=self.ids[side].name,
            app_name="pd",
            current_num_replicas=len(running),
            target_num_replicas=self.targets[side],
            running_replicas=ids,
            total_num_requests=sum(series) / len(series) if series else 0.0,
            total_queued_requests=0.0,
            aggregated_metrics=metrics,
            raw_metrics={},
            capacity_adjusted_min_replicas=config.min_replicas,
            capacity_adjusted_max_replicas=config.max_replicas,
            policy_state=dict(self.states[self.ids[side]]),
            last_scale_up_time=None,
            last_scale_down_time=None,
            current_time=now,
            config=config,
            total_pending_async_requests=0,
        )

    def decide(self, cluster: Cluster, now: float) -> None:
        clock = self._serve_policy.time
        original = clock.time
        clock.time = lambda: now
        try:
            contexts = {side: self._context(side, cluster, now) for side in SIDES}
            if self.policy == "latency":
                decisions, states = self.wrapped({c.deployment_id: c for c in contexts.values()})
                self.states.update(states)
                result = {side: decisions[self.ids[side]] for side in SIDES}
            else:
                result = {}
                for side in SIDES:
                    result[side], self.states[self.ids[side]] = self.wrapped[side](contexts[side])
        finally:
            clock.time = original
        for side in SIDES:
            config = self.configs[side]
            wanted = max(config.min_replicas, min(config.max_replicas, math.ceil(result[side])))
            if wanted != self.targets[side]:
                self.decisions.append(
                    {"t": round(now), "side": side, "from": self.targets[side], "to": wanted}
                )
            self.targets[side] = wanted
            cluster.scale(side, wanted, now)


# ---- one replay


def replay(
    model: EngineModel,
    requests: list[Request],
    objectives: Objectives,
    settings: dict[str, Any],
    policy: str,
    tuning: dict[str, Any] | None = None,
    startup_s: dict[str, float] = STARTUP_S,
) -> dict[str, Any]:
    """policy: 'queue', 'latency' or 'fixed' (settings[side]['initial'] replicas throughout);
    tuning: the latency policy's (latency_policy.Tuning's fields, its defaults where absent);
    startup_s: each side's engine start (the real engines' by default)."""
    requests = [Request(r.arrival, r.prompt, r.answer) for r in requests]
    cluster = Cluster(model, {side: settings[side]["initial"] for side in SIDES}, startup_s)
    controller = None if policy == "fixed" else Controller(policy, settings, objectives, tuning)
    done: list[Request] = []
    pending = iter(requests)
    upcoming = next(pending, None)
    now, next_push, next_decision, next_record = 0.0, PUSH_S, DECISION_S, RECORD_S
    end = DURATION_S + 120
    while now < end:
        while upcoming is not None and upcoming.arrival <= now:
            cluster.arrive(upcoming, now)
            upcoming = next(pending, None)
        cluster.step(now, STEP_S, done)
        if now >= next_record:
            cluster.record_metrics(now)
            next_record += RECORD_S
        if now >= next_push:
            cluster.push_metrics(now, objectives.percentile)
            next_push += PUSH_S
        if controller is not None and now >= next_decision:
            controller.decide(cluster, now)
            next_decision += DECISION_S
        now += STEP_S
    return score(requests, cluster.itl_by_minute, objectives, cluster, controller, end)


def score(
    requests: list[Request],
    itl_by_minute: dict[int, list[tuple[float, float]]],
    objectives: Objectives,
    cluster: Cluster,
    controller: Controller | None,
    end: float,
) -> dict[str, Any]:
    ttft_by_minute: dict[int, list[float]] = {}
    for request in requests:
        ttft = request.ttft if request.ttft else end - request.arrival  # never answered
        ttft_by_minute.setdefault(int(request.arrival // 60), []).append(ttft)
    first, last = int(WARM_UP_S // 60), int(DURATION_S // 60)
    held, minutes = 0, []
    for minute in range(first, last):
        ttft = percentile(ttft_by_minute.get(minute, []), objectives.percentile)
        itl = weighted_percentile(itl_by_minute.get(minute, []), objectives.percentile)
        ok = (ttft is None or ttft <= objectives.ttft_s) and (
            itl is None or itl <= objectives.itl_s
        )
        held += ok
        minutes.append(
            {
                "minute": minute,
                "ttft_s": None if ttft is None else round(ttft, 4),
                "itl_s": None if itl is None else round(itl, 5),
                "held": ok,
                "replicas": {
                    side: len(cluster_at(cluster, side, minute * 60 + 30)) for side in SIDES
                },
            }
        )
    seconds = replica_seconds_between(cluster, WARM_UP_S, DURATION_S)
    return {
        "minutes_scored": last - first,
        "minutes_held": held,
        "share_held": round(held / (last - first), 4),
        "replica_seconds": {side: round(v) for side, v in seconds.items()},
        "replica_seconds_total": round(sum(seconds.values())),
        "scaling_changes": len(controller.decisions) if controller else 0,
        "per_minute": minutes,
    }


def cluster_at(cluster: Cluster, side: str, t: float) -> list[Replica]:
    return [
        r for r in cluster.replicas[side] if r.started <= t and (r.gone_at is None or r.gone_at > t)
    ]


def replica_seconds_between(cluster: Cluster, start: float, stop: float) -> dict[str, float]:
    """GPU replicas held (starting, serving or draining) within the scored window."""
    return {
        side: sum(
            max(
                0.0, min(stop, r.gone_at if r.gone_at is not None else stop) - max(start, r.started)
            )
            for r in cluster.replicas[side]
        )
        for side in SIDES
    }


# ---- the three policies


def today_settings() -> dict[str, Any]:
    """The defaults of app_config/serving.py (_prefill_engine, _decode_engine), max_replicas 8."""
    from app_config.serving import _decode_engine, _prefill_engine

    settings: dict[str, Any] = {}
    for side, engine in (("prefill", _prefill_engine()), ("decode", _decode_engine())):
        settings[side] = {
            "min_replicas": 1,
            "max_replicas": 8,
            "initial": 1,
            **engine.autoscaling.model_dump(),
        }
    return settings


def run(log: Callable[[str], None] = print) -> dict[str, Any]:
    model, fitted = fit()
    requests = workload()
    objectives = OBJECTIVES
    settings = today_settings()
    # A warm start for both autoscaled runs: the replicas the first phase needs (the best fixed
    # counts for it), so that the scored window compares the policies, not a cold start.
    for side, count in WARM_START.items():
        settings[side]["initial"] = count
    results: dict[str, Any] = {}
    log(f"model: {fitted['decode_itl_s']}, prefill {fitted['prefill_tokens_per_s']} tokens/s")
    results["queue"] = replay(model, requests, objectives, settings, "queue")
    log(_line("queue", results["queue"]))
    results["latency"] = replay(model, requests, objectives, settings, "latency")
    log(_line("latency", results["latency"]))
    # The best fixed ratio: the fewest replicas (the same replica-seconds for every split of a
    # total) that hold the objectives in 95 % of the scored minutes, every split tried.
    search, best = [], None
    for total in range(2, 17):
        for p in range(1, total):
            d = total - p
            if p > 8 or d > 8:
                continue
            fixed = {side: {**settings[side]} for side in SIDES}
            fixed["prefill"]["initial"], fixed["decode"]["initial"] = p, d
            result = replay(model, requests, objectives, fixed, "fixed")
            search.append(
                {"prefill": p, "decode": d, "share_held": result["share_held"],
                 "replica_seconds_total": result["replica_seconds_total"]}
            )  # fmt: skip
            if result["share_held"] >= 0.95 and (
                best is None or result["share_held"] > best[1]["share_held"]
            ):
                best = ((p, d), result)
        if best is not None:
            break
    if best is not None:
        results["best_fixed"] = {"prefill": best[0][0], "decode": best[0][1], **best[1]}
        log(_line(f"fixed {best[0][0]}:{best[0][1]}", best[1]))
    return {
        "date": datetime.date.today().isoformat(),
        "what": "trace replay against a simulation of Ray Serve 2.58's autoscaling loop "
        "(Ray's own policy and delay code under a virtual clock; tools/latency_replay.py)",
        "model": fitted,
        "objectives": {"ttft_p95_s": objectives.ttft_s, "itl_p95_s": objectives.itl_s},
        "workload": {
            "phases": [p.__dict__ for p in PHASES],
            "duration_s": DURATION_S,
            "blend_s": BLEND_S,
            "scored_from_s": WARM_UP_S,
            "requests": len(requests),
            "lengths": "log-normal, sigma 0.5, around each phase's means",
        },
        "serve_settings": settings,
        "startup_s": STARTUP_S,
        "results": {
            name: {k: v for k, v in result.items() if k != "per_minute"}
            for name, result in results.items()
        },
        "per_minute": {name: result["per_minute"] for name, result in results.items()},
        "fixed_search": search,
    }


def latency_from(warm: dict[str, int], log: Callable[[str], None] = print) -> dict[str, Any]:
    """The latency policy alone, from another warm start (e.g. 3:3, decode where a queue
    fallback that counts prefill's work put it on the local Ray): whether it brings a side
    down that its load no longer needs, and what that costs in minutes held."""
    model, _ = fit()
    settings = today_settings()
    for side, count in warm.items():
        settings[side]["initial"] = count
    result = replay(model, workload(), OBJECTIVES, settings, "latency")
    log(_line(f"latency {warm['prefill']}:{warm['decode']}", result))
    log(f"replica-seconds per side: {result['replica_seconds']}")
    return result


def _line(name: str, result: dict[str, Any]) -> str:
    return (
        f"{name:>12}: objectives held in {result['minutes_held']}/{result['minutes_scored']} "
        f"minutes ({result['share_held']:.0%}), {result['replica_seconds_total']} replica-seconds"
    )


NAMES = {"queue": "queue policy (today's settings)", "best_fixed": "best fixed ratio",
         "latency": "latency policy"}  # fmt: skip


# A column some tables add: its header and its cell from one sizing's result.
Column = tuple[str, Callable[[dict[str, Any]], str]]


def table(recorded: dict[str, Any], sizing: str = "sizing", extra: tuple[Column, ...] = ()) -> str:
    """The docs' table of a recorded replay (docs/verification.md quotes it whole); the local
    replay's adds its own columns (tools/latency_replay_score.py)."""
    results = recorded["results"]
    best = results["best_fixed"]["replica_seconds_total"]
    headers = [sizing, "prefill:decode", "minutes with both objectives held", "replica-seconds",
               "x best fixed", *(header for header, _ in extra)]  # fmt: skip
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for name in ("queue", "best_fixed", "latency"):
        result = results[name]
        ratio = (
            f"{result['prefill']}:{result['decode']} fixed"
            if name == "best_fixed"
            else "autoscaled"
        )
        cells = [
            NAMES[name],
            ratio,
            f"{result['minutes_held']} of {result['minutes_scored']} ({result['share_held']:.1%})",
            f"{result['replica_seconds_total']:,}",
            f"{result['replica_seconds_total'] / best:.2f}",
            *(cell(result) for _, cell in extra),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the result JSON here")
    parser.add_argument("--report", type=Path, help="print the table of a recorded result")
    parser.add_argument(
        "--latency-from", metavar="P:D", help="only the latency policy, warm at P:D replicas"
    )
    args = parser.parse_args(argv)
    if args.latency_from:
        p, d = (int(n) for n in args.latency_from.split(":"))
        latency_from({"prefill": p, "decode": d})
        return 0
    if args.report:
        print(table(json.loads(args.report.read_text())), end="")
        return 0
    result = run()
    print(table(result), end="")
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
