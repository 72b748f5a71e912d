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
   60 / C seconds of the run. What does not compress is the machine's own time: a replica's
   start (10.7 s), Serve's control loop (0.1 s) and the controller's and replicas' delays on
   two cores. At 15x a replica's start alone is 160 s of the workload's time where a real
   decode engine's is 106 s, and a scored minute (4 s) holds 13 of prefill's 0.31 s forward
   passes, so that its p95 follows bursts of a few requests (docs/verification.md, "What the
   compression distorts"). A smaller C (`--compression`, the one C used for every sizing of a
   run) costs wall time: 5,400 / C seconds per sizing.
2. The requests are thinned, each replayed request standing for C x D real ones, and each
   request's own times are dilated by D (`dilation`): arrivals D times sparser, each engine
   time (prefill's forward pass, decode's step, the KV hand-off) and both objectives D times
   longer. Prefill's utilisation and TTFT in objective units are then the model's (a thinned
   Poisson process is Poisson: prefill's FIFO queue is the real one, time-scaled by D).
   Answers are C x D times shorter, so that a stream lasts as long, in the compressed
   timeline, as a real one does. Prompts are `prompt_divisor` times shorter in words, each word
   costing as many real tokens, so that their text is cheap to send. Decode's target of
   requests in flight per replica is divided as its streams are (`ongoing_divisor`): Serve's
   queue policy sees the load it would see deployed.
3. Decode runs the thinned-away requests as companions (`split`; tests/e2e/latency_model.py
   Companions): each at its own arrival time (compressed) with its answer length (shortened as
   a stream's), split at random among the running decode replicas, where it takes its part of
   every step and produces no output. A step's cost is the fitted curve's at the replica's
   streams and companions together, each one real sequence (D x the real step): a decode
   replica runs as many sequences as a real one (about 75 on the long answers), with the spread
   of a random split of the real arrivals. Before this (the 2026-12-07 run) each replayed
   stream cost C x D real sequences, so a replica's 2 or 3 streams stood for 75, and their
   Poisson spread, sqrt(C x D) times too wide relative to the mean, put ITL p95 well above the
   mean. (Companions carried by their replayed request, to its replica, would keep much of that
   spread: C x D - 1 of them land together.)

The trade-off: Serve carries one request in C x D, so only those streams' ITL is measured:
about 24 streams per scored minute of long answers (each minute's p95 is its second highest),
where a real minute has 720. The companions skip prefill, Serve and the KV pull (they arrive
at decode when the real requests arrive at the application) and are split at random, where
Serve's power-of-two choices would balance the replicas more. What Serve carries stays what
two cores can: about 6 requests/s and a few hundred streamed tokens/s.

Under the model of tools/latency_replay.py `fit()` (one source of truth for the engines) this
leaves each side's load, in replicas needed, as in the simulation: by Little's law a decode
replica's sequences are the replayed arrival rate (C times the real one, over C x D) plus its
companions' (C x D - 1 as many), times a sequence's duration (answer / (C x D) tokens at D x the
real step), which is the real arrival rate times the real duration.
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
# its placement group, the imports of Ray Serve LLM and vLLM. Measured on the seventh local run
# (docs/latency-replay/2026-12-07-engine-final-local.json, replica_starts_s: the nine replicas
# added during its three sizings, each with an engine start of 0 s, first seen STARTING to
# first seen RUNNING): 8.8 to 12.1 s, median 10.7 s. (On 2026-12-06, on the machine's earlier
# CPU: 34.9 s for a replica whose engine slept 15.9 s, so 19 s.) The stand-in's engine start is
# what is left of the real engine's compressed start after it, so that a replica serves
# STARTUP_S of the workload's time after Serve starts it: at 15x nothing is left (decode's
# 106 s is 7.1 s; a replica took 10.7 s, 160 s of the workload's time), at 7.5x decode's engine
# sleeps 3.4 s and prefill's 21.0 s (`engine_latency`).
REPLICA_START_S = 10.7
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
    # Change 3; off: each replayed stream costs decode C x D sequences (the 2026-12-07 run).
    companions: bool = True
    # What the stand-in's engine start leaves to the replica's own (REPLICA_START_S; recorded
    # with the scale, 19 s in the runs before it was).
    replica_start_s: float = REPLICA_START_S

    def __post_init__(self) -> None:
        if self.compression < 1 or self.dilation < 1 or self.prompt_divisor < 1:
            raise ValueError(f"every factor of a replay's scale is at least 1: {asdict(self)}")
        if self.replica_start_s < 0:
            raise ValueError(f"a replica's own start is not negative: {asdict(self)}")

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
    fitted model: per prompt word, and per running sequence (a stream or a companion, each one
    real sequence; without companions a stream stands for `thinning` sequences)."""
    d = scale.dilation
    return {
        "prefill_step_s": d * model.step_s,
        "prefill_s_per_token": d * scale.prompt_divisor / model.prefill_tokens_per_s,
        "decode_step_s": d * model.step_s,
        "decode_s_per_running": d * model.per_seq_s * (1 if scale.companions else scale.thinning),
        "handoff_s_per_token": d * scale.prompt_divisor * HANDOFF_S_PER_TOKEN,
        "start_s": {
            side: max(0.0, seconds / scale.compression - scale.replica_start_s)
            for side, seconds in STARTUP_S.items()
        },
    }


@dataclass(frozen=True)
class ReplayedRequest:
    at_s: float  # when it is sent, in seconds of the run
    prompt_words: int
    answer_tokens: int


def replayed(requests: list[Request], scale: ReplayScale, seed: int = 11) -> list[ReplayedRequest]:
    """The requests the replay sends (`split`)."""
    return split(requests, scale, seed)[0]


def split(
    requests: list[Request], scale: ReplayScale, seed: int = 11
) -> tuple[list[ReplayedRequest], list[tuple[float, int]]]:
    """The simulation's workload (tools/latency_replay.py workload()) thinned at random, one in
    `thinning` kept (a thinned Poisson process is a Poisson process), its timeline compressed,
    its lengths divided; and the requests thinned away, decode's companions: (seconds of the
    run, answer tokens) each, none without `scale.companions`. An answer keeps two tokens at
    least: one gap to time."""
    rng = random.Random(seed)
    kept: list[ReplayedRequest] = []
    companions: list[tuple[float, int]] = []
    for request in requests:
        at_s = request.arrival / scale.compression
        if rng.random() * scale.thinning >= 1.0:
            if scale.companions:
                companions.append((at_s, answer_tokens(request.answer, scale)))
            continue
        kept.append(
            ReplayedRequest(
                at_s=at_s,
                prompt_words=max(2, round(request.prompt / scale.prompt_divisor)),
                answer_tokens=answer_tokens(request.answer, scale),
            )
        )
    return kept, companions


def answer_tokens(real: int, scale: ReplayScale) -> int:
    """A replayed answer's tokens (a stream's or a companion's): two at least."""
    return max(2, round(real / scale.answer_divisor))


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
    """What a side's requests in flight, as Serve counts them, shrink by, and so its
    target_ongoing_requests (Serve's queue policy, and the latency policy's queue fallback): by
    Little's law prefill's stay the model's (D times fewer arrivals, each D times longer);
    decode's are `thinning` times fewer (Serve sees one stream of each request and its
    companions, which are its sequences too)."""
    return scale.thinning if side == "decode" else 1.0


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
        "companions_are": "the requests thinned away, run by the decode replicas as sequences "
        "beside their streams, each at its own time, split at random among the running ones "
        "(tests/e2e/latency_model.py Companions)",
        "dilated": [
            "arrival gaps",
            "prefill time",
            "decode step",
            "KV hand-off",
            "TTFT and ITL objectives",
        ],
    }
