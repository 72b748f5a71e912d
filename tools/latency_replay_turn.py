"""The turn to long answers (issue 33): the candidate rules for holding it, each run on the
simulation of Serve's loop (tools/latency_replay.py) from its warm start (3 prefill, 1 decode),
and when a demand estimate in the style of NVIDIA Dynamo's planner would first ask for a second
decode replica. Prints the docs' tables (docs/verification.md quotes them;
tests/serve_extensions/test_latency_replay_turn.py compares them and holds their claims).

    .venv/bin/python -m tools.latency_replay_turn

The question is one of time. At the turn (the blend from 3,600 s to 3,780 s) decode's ITL at one
replica crosses its objective about 90 s in, and a replica asked for serves after Serve's
upscale delay and its engine's start: 60 s + 106 s at the defaults in the simulation, 60 s + 200
to 233 s on the local replay (its stand-in replicas started in 27 to 31 s of a 7.5x run, the
ninth run). A rule helps only if it asks earlier than the lead does or serves sooner once asked.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

# Imported before any handler is added: its import configures the "ray.serve" logger, which
# the policy's lines go to, and a handler added earlier does not receive them.
import ray.serve.autoscaling_policy  # noqa: F401

from tools.latency_policy_log import decisions
from tools.latency_replay import (
    LOOK_BACK_S,
    OBJECTIVES,
    STARTUP_S,
    WARM_START,
    EngineModel,
    Request,
    fit,
    replay,
    today_settings,
    workload,
)

TURN_S = 3600.0  # the blend to long answers starts (tools/latency_replay.py PHASES)
# The local replay's decode start in the workload's time (the ninth run's three added replicas:
# 27 to 31 s of a 7.5x run, 202 to 233 s): the simulation's decode started as slowly.
LOCAL_DECODE_START_S = 220.0
DECODE_UPSCALE_DELAY_S = today_settings()["decode"]["upscale_delay_s"]


@dataclass(frozen=True)
class Candidate:
    """A rule tried at the turn: the latency policy's tuning, decode's Serve upscale delay,
    decode's engine start and its bounds in replicas."""

    name: str
    tuning: dict[str, Any] = field(default_factory=dict)
    decode_upscale_delay_s: float = DECODE_UPSCALE_DELAY_S
    decode_start_s: float = STARTUP_S["decode"]
    max_replicas: int = 8


CANDIDATES = (
    Candidate("today's policy and settings"),
    Candidate(
        "lead horizon = decode's upscale delay + engine start (166 s, not 4 look-backs)",
        tuning={"lead_look_backs": (DECODE_UPSCALE_DELAY_S + STARTUP_S["decode"]) / LOOK_BACK_S},
    ),
    Candidate("step up to what the prediction needs (max_step_up 4, not 2)", {"max_step_up": 4.0}),
    Candidate("no upscale delay on decode (0 s, not 60 s)", decode_upscale_delay_s=0.0),
    Candidate(
        "today's, with the local runs' decode start (220 s) and 4 replicas a side",
        decode_start_s=LOCAL_DECODE_START_S,
        max_replicas=4,
    ),
    Candidate(
        "no upscale delay on decode, with the local runs' decode start and 4 a side",
        decode_upscale_delay_s=0.0,
        decode_start_s=LOCAL_DECODE_START_S,
        max_replicas=4,
    ),
)


class _Lines(logging.Handler):
    """The latency policy's lines (latency_autoscaler._log_changes) as the run prints them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.text: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.text.append(record.getMessage())


def run_candidate(candidate: Candidate, model: EngineModel, requests: list[Request]) -> dict:
    """One candidate's replay of the latency policy: the minutes held and out, replica-seconds,
    decode's replicas minute by minute as a path, and decode's first ask for more at the turn
    (the policy's want, before Serve's delay) with its reason."""
    settings = today_settings()
    for side, count in WARM_START.items():
        settings[side]["initial"] = count
        settings[side]["max_replicas"] = candidate.max_replicas
    settings["decode"]["upscale_delay_s"] = candidate.decode_upscale_delay_s
    startup = {**STARTUP_S, "decode": candidate.decode_start_s}
    lines = _Lines()
    logger = logging.getLogger("ray.serve")
    logger.addHandler(lines)
    try:
        result = replay(model, requests, OBJECTIVES, settings, "latency", candidate.tuning, startup)
    finally:
        logger.removeHandler(lines)
    asks = [
        d
        for d in decisions("\n".join(lines.text), 0.0)
        if d["side"] == "decode" and d["t_s"] >= TURN_S - 300 and d["replicas"] > 1
    ]
    decode = [m["replicas"]["decode"] for m in result["per_minute"]]
    return {
        "minutes_held": result["minutes_held"],
        "minutes_scored": result["minutes_scored"],
        "out": [m["minute"] for m in result["per_minute"] if not m["held"]],
        "replica_seconds_total": result["replica_seconds_total"],
        "decode_path": [
            c for c, before in zip(decode, [None, *decode], strict=False) if c != before
        ],
        "first_ask": (asks[0]["t_s"], asks[0]["reason"]) if asks else None,
    }


def decode_capacity(model: EngineModel, itl_s: float) -> float:
    """Output tokens/s one decode replica delivers at this ITL on the fitted model: the running
    sequences at which the step takes itl_s, one token each per step."""
    return (itl_s - model.step_s) / model.per_seq_s / itl_s


def demand_first_ask(
    model: EngineModel,
    requests: list[Request],
    known_at_arrival: bool,
    window_s: float = LOOK_BACK_S,
) -> float | None:
    """When a Dynamo-style estimate (requests per second over the look-back x tokens per answer,
    against the tokens/s one replica delivers at the policy's aim) first asks for a second
    decode replica at the turn. known_at_arrival: each answer's length is known when it arrives
    (the best case: a max_tokens that every answer reaches); else the mean of the answers
    finished within the window (the planner's observed output length), each finishing after
    its tokens at the aim's ITL."""
    aim_itl = 0.7 * OBJECTIVES.itl_s
    capacity = decode_capacity(model, aim_itl)
    t = TURN_S - 120
    while t < TURN_S + 300:
        arrived = [r for r in requests if t - window_s < r.arrival <= t]
        measured = (
            arrived
            if known_at_arrival
            else [r for r in requests if t - window_s < r.arrival + r.answer * aim_itl <= t]
        )
        if arrived and measured:
            demand = len(arrived) / window_s * sum(r.answer for r in measured) / len(measured)
            if demand > capacity:
                return t
        t += 2.0
    return None


@dataclass(frozen=True)
class Turn:
    """What the tables show: each candidate's replay, and who asks for decode's second replica
    first (None: never)."""

    candidates: list[tuple[Candidate, dict[str, Any]]]
    asks: list[tuple[str, float | None]]


def turn() -> Turn:
    model, _ = fit()
    requests = workload()
    results = [(c, run_candidate(c, model, requests)) for c in CANDIDATES]
    lead = results[0][1]["first_ask"]
    asks: list[tuple[str, float | None]] = [
        ("the lead on decode's engine count (today)", lead[0] if lead else None)
    ]
    for known, name in ((True, "answers' lengths known at arrival"),
                        (False, "answers' lengths of finished requests")):  # fmt: skip
        asks.append(
            (f"demand estimate at the aim's capacity, {name}",
             demand_first_ask(model, requests, known))
        )  # fmt: skip
    return Turn(results, asks)


def tables(found: Turn) -> tuple[str, str]:
    """The docs' two tables: the candidates, and the demand estimates beside the lead."""
    today = found.candidates[0][1]["replica_seconds_total"]
    lines = [
        "| candidate (simulation, from 3:1) | minutes held | minutes out | decode replicas "
        "| decode's first ask at the turn | replica-seconds (x today's) |",
        "|---|---|---|---|---|---|",
    ]
    for candidate, r in found.candidates:
        ask = (
            "none"
            if r["first_ask"] is None
            else f"{r['first_ask'][0]:,.0f} s ({r['first_ask'][1]})"
        )
        lines.append(
            f"| {candidate.name} | {r['minutes_held']} of {r['minutes_scored']} "
            f"| {', '.join(str(m) for m in r['out']) or 'none'} "
            f"| {' -> '.join(str(n) for n in r['decode_path'])} | {ask} "
            f"| {r['replica_seconds_total']:,} ({r['replica_seconds_total'] / today:.2f}) |"
        )
    serve_after = DECODE_UPSCALE_DELAY_S + STARTUP_S["decode"]
    demand = [
        "| who asks for decode's second replica | first asks at | serves at the earliest "
        "(+ 60 s delay + 106 s start) |",
        "|---|---|---|",
    ]
    for name, at in found.asks:
        served = (
            "-"
            if at is None
            else f"{at + serve_after:,.0f} s (minute {math.floor((at + serve_after) / 60)})"
        )
        demand.append(f"| {name} | {'never' if at is None else f'{at:,.0f} s'} | {served} |")
    return "\n".join(lines) + "\n", "\n".join(demand) + "\n"


def main() -> int:
    logging.getLogger("ray.serve").handlers.clear()  # the tables alone, not every line
    for table in tables(turn()):
        print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
