"""How the latency-policy replay's workload, engines and Serve timing shrink to fit the local Ray
on a 2-core machine (`make latency-replay`, tests/e2e/latency_replay_local.py): every change the
local replay makes to the simulation's inputs (tools/latency_replay.py), with its factor.

The simulation replays 90 minutes of 12 requests/s, with prompts of up to tens of thousands of
tokens, answers of 1,500, and a hundred streams or more per decode replica. Two cores carry a
few hundred streamed tokens per second through Serve (docs/verification.md, "The ingress's
ceiling"), so the local replay changes two things and keeps the rest:

1. Time is compressed by `compression` (C) for everything that runs on the control loop's
   scale: the workload's timeline (its phases and blends), Serve's upscale and downscale
   delays (which are the policy's cool-downs), the look-back window, the replicas' and handles'
   metric push interval, the graceful-shutdown wait loop and timeout, and the engines' start-up
   times (less the replica's own start on this machine, REPLICA_START_S). A scored minute is
   60 / C seconds of the run.
2. The requests are thinned, each replayed request standing for C x D real ones, and each
   request's own times are dilated by D (`dilation`): arrivals D times sparser, each engine
   time (prefill's forward pass, decode's step, the KV hand-off) and both objectives D times
   longer. Prefill's utilisation and TTFT in objective units are then the model's; so is
   decode's ITL, with answers C x D times shorter and each running sequence costing C x D
   times as much (one replayed stream for C x D real ones). Prompts are `prompt_divisor` times
   shorter in words, each word costing as many real tokens, so that their text is cheap to send.
   Decode's target of requests in flight per replica is divided as its streams are
   (`ongoing_divisor`): Serve's queue policy sees the load it would see deployed.

Under the model of tools/latency_replay.py `fit()` (one source of truth for the engines) this
leaves each side's load, in replicas needed, as in the simulation.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from tools.latency_replay import (
    HANDOFF_S_PER_TOKEN,
    LOOK_BACK_S,
    OBJECTIVES,
    PUSH_S,
    STARTUP_S,
    EngineModel,
    Objectives,
    Request,
)

# Serve's autoscaling_config fields that are durations on the control loop's scale, with Ray's
# defaults for a config that sets none (ray/serve/config.py AutoscalingConfig, Ray 2.58; the
# look-back is the simulation's LOOK_BACK_S), and the deployment_config's.
AUTOSCALING_DURATIONS = {
    "upscale_delay_s": 30.0,
    "downscale_delay_s": 600.0,
    "look_back_period_s": LOOK_BACK_S,
}
DEPLOYMENT_DURATIONS = ("graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s")
# A stand-in replica's own start on the 2-core machine, before its engine starts: Ray's actor,
# its placement group, the imports of Ray Serve LLM and vLLM (measured: 34.9 s from "Starting"
# to "started successfully" in Serve's controller log for a replica whose engine slept 15.9 s,
# 2026-12-06). The stand-in's engine start is what is left of the real engine's compressed start
# after it: nothing, on this machine (docs/verification.md says what that does to the figures).
REPLICA_START_S = 19.0
# ray/serve/_private/constants.py: how often replicas and handles push their metrics (10 s).
PUSH_INTERVAL_ENV = (
    "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S",
    "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S",
)


@dataclass(frozen=True)
class ReplayScale:
    compression: float = 15.0
    dilation: float = 2.0
    prompt_divisor: float = 10.0

    def __post_init__(self) -> None:
        if self.compression < 1 or self.dilation < 1 or self.prompt_divisor < 1:
            raise ValueError(f"every factor of a replay's scale is at least 1: {asdict(self)}")

    @property
    def thinning(self) -> float:
        """Real requests each replayed request stands for."""
        return self.compression * self.dilation

    @property
    def answer_divisor(self) -> float:
        return self.thinning

    @property
    def minute_s(self) -> float:
        """Seconds of the run that stand for one minute."""
        return 60.0 / self.compression


def objectives(scale: ReplayScale, real: Objectives = OBJECTIVES) -> Objectives:
    """The objectives in the run's time: each request's times are dilated."""
    return Objectives(
        ttft_s=real.ttft_s * scale.dilation,
        itl_s=real.itl_s * scale.dilation,
        percentile=real.percentile,
    )


def engine_latency(model: EngineModel, scale: ReplayScale) -> dict[str, Any]:
    """The stand-in's STANDIN_LATENCY_MODEL (tests/e2e/latency_model.py EngineLatency) for the
    fitted model: per prompt word and per replayed running sequence."""
    d = scale.dilation
    return {
        "prefill_step_s": d * model.step_s,
        "prefill_s_per_token": d * scale.prompt_divisor / model.prefill_tokens_per_s,
        "decode_step_s": d * model.step_s,
        "decode_s_per_running": d * scale.answer_divisor * model.per_seq_s,
        "handoff_s_per_token": d * scale.prompt_divisor * HANDOFF_S_PER_TOKEN,
        "start_s": {
            side: max(0.0, seconds / scale.compression - REPLICA_START_S)
            for side, seconds in STARTUP_S.items()
        },
    }


@dataclass(frozen=True)
class ReplayedRequest:
    at_s: float  # when it is sent, in seconds of the run
    prompt_words: int
    answer_tokens: int


def replayed(requests: list[Request], scale: ReplayScale, seed: int = 11) -> list[ReplayedRequest]:
    """The simulation's workload (tools/latency_replay.py workload()) thinned at random, one in
    `thinning` kept (a thinned Poisson process is a Poisson process), its timeline compressed,
    its lengths divided. An answer keeps two tokens at least: one gap to time."""
    rng = random.Random(seed)
    kept = []
    for request in requests:
        if rng.random() * scale.thinning >= 1.0:
            continue
        kept.append(
            ReplayedRequest(
                at_s=request.arrival / scale.compression,
                prompt_words=max(2, round(request.prompt / scale.prompt_divisor)),
                answer_tokens=max(2, round(request.answer / scale.answer_divisor)),
            )
        )
    return kept


def serve_timing(deployment_config: dict[str, Any], scale: ReplayScale) -> dict[str, Any]:
    """A deployment_config with its control-loop durations compressed (Serve's defaults where
    the config sets none)."""
    config = dict(deployment_config)
    autoscaling = {**AUTOSCALING_DURATIONS, **config.get("autoscaling_config", {})}
    for key in AUTOSCALING_DURATIONS:
        autoscaling[key] = autoscaling[key] / scale.compression
    config["autoscaling_config"] = autoscaling
    for key in DEPLOYMENT_DURATIONS:
        if key in config:
            config[key] = config[key] / scale.compression
    return config


def ongoing_divisor(side: str, scale: ReplayScale) -> float:
    """What a side's requests in flight shrink by, and so its target_ongoing_requests (Serve's
    queue policy, and the latency policy's queue fallback): by Little's law prefill's stay the
    model's (D times fewer arrivals, each D times longer), decode's are answer_divisor times
    fewer (one replayed stream for that many real ones)."""
    return scale.answer_divisor if side == "decode" else 1.0


def ray_environment(scale: ReplayScale) -> dict[str, str]:
    """Serve's metric push intervals, compressed (read at import by every Ray process)."""
    return {name: f"{PUSH_S / scale.compression:g}" for name in PUSH_INTERVAL_ENV}


def describe(scale: ReplayScale) -> dict[str, Any]:
    """The scale as the run's JSON records it and prints it."""
    return {
        **asdict(scale),
        "thinning": scale.thinning,
        "answer_divisor": scale.answer_divisor,
        "minute_s": round(scale.minute_s, 3),
        "compressed": [
            *AUTOSCALING_DURATIONS,
            *DEPLOYMENT_DURATIONS,
            *PUSH_INTERVAL_ENV,
            "workload timeline",
            "engine start-up",
        ],
        "dilated": [
            "arrival gaps",
            "prefill time",
            "decode step",
            "KV hand-off",
            "TTFT and ITL objectives",
        ],
    }
