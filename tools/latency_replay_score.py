"""The local latency-policy replay's figures (tests/e2e/latency_replay_local.py): from what the
clients measured, the share of (compressed) minutes in which both objectives held; from
Serve's replica states over time, the replica-seconds each sizing used; and the docs' table
(docs/verification.md quotes it as `table()` prints it; tests/config/test_latency_replay_docs.py
compares them).

Rules, the simulation's where it has one (tools/latency_replay.py score()):
- a minute is scored from the end of the warm-up (WARM_UP_S) to the end of the workload
  (DURATION_S), in the workload's time: minute m is the run's seconds [m, m + 1) x 60 / C;
- a request belongs to the minute it was sent in; the minute's TTFT is the objective's
  percentile of its requests' TTFT, a request that failed or was not answered counting as
  infinitely late; its ITL the percentile of its streams' mean inter-token latency (streams of
  two tokens or more), as the replicas report it (serve_extensions/latency_window.py), by the
  policy's own percentile rule (latency_policy.percentile, nearest rank);
- a minute holds when both are within their objectives (a minute without a stream to time
  holds on ITL, as in the simulation);
- replica-seconds: each side's replicas in any state (starting, running, stopping: each holds
  its GPUs) as Serve reported them, sampled over the scored window, times C (seconds of the
  workload's time, comparable with the simulation's).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from serve_extensions.latency_policy import percentile
from tools.latency_replay import DURATION_S, SIDES, WARM_UP_S, Objectives
from tools.latency_replay import table as replay_table
from tools.latency_replay_scale import ReplayScale


def minutes(
    requests: list[dict[str, Any]], objectives: Objectives, scale: ReplayScale
) -> list[dict[str, Any]]:
    """One entry per scored minute. A request: at_s (sent, seconds of the run), ttft_s and
    itl_s (None where there is none), failed."""
    by_minute: dict[int, list[dict[str, Any]]] = {}
    for request in requests:
        by_minute.setdefault(int(request["at_s"] // scale.minute_s), []).append(request)
    scored = []
    for minute in range(int(WARM_UP_S // 60), int(DURATION_S // 60)):
        sent = by_minute.get(minute, [])
        ttfts = [math.inf if r["failed"] or r["ttft_s"] is None else r["ttft_s"] for r in sent]
        itls = [r["itl_s"] for r in sent if not r["failed"] and r["itl_s"] is not None]
        ttft = percentile(ttfts, objectives.percentile)
        itl = percentile(itls, objectives.percentile)
        held = (ttft is None or ttft <= objectives.ttft_s) and (
            itl is None or itl <= objectives.itl_s
        )
        scored.append(
            {
                "minute": minute,
                "requests": len(sent),
                "failed": sum(1 for r in sent if r["failed"]),
                "ttft_s": None if ttft is None else (None if ttft == math.inf else round(ttft, 4)),
                "ttft_unanswered": ttft == math.inf,
                "itl_s": None if itl is None else round(itl, 5),
                "held": held,
            }
        )
    return scored


def replica_seconds(
    samples: list[tuple[float, dict[str, int]]], scale: ReplayScale
) -> dict[str, float]:
    """Each side's replicas integrated over the scored window: samples (seconds of the run,
    replicas per side) taken in order; each count holds until the next sample."""
    start, stop = WARM_UP_S / scale.compression, DURATION_S / scale.compression
    totals = dict.fromkeys(SIDES, 0.0)
    for (t, counts), (t_next, _) in itertools.pairwise(samples):
        overlap = max(0.0, min(stop, t_next) - max(start, t))
        for side in SIDES:
            totals[side] += counts.get(side, 0) * overlap
    return {side: value * scale.compression for side, value in totals.items()}


def covered(samples: list[tuple[float, dict[str, int]]], scale: ReplayScale) -> bool:
    """The samples span the scored window (else its replica-seconds are short)."""
    start, stop = WARM_UP_S / scale.compression, DURATION_S / scale.compression
    return bool(samples) and samples[0][0] <= start and samples[-1][0] >= stop


def score(
    requests: list[dict[str, Any]],
    samples: list[tuple[float, dict[str, int]]],
    objectives: Objectives,
    scale: ReplayScale,
) -> dict[str, Any]:
    per_minute = minutes(requests, objectives, scale)
    held = sum(1 for m in per_minute if m["held"])
    seconds = replica_seconds(samples, scale)
    return {
        "minutes_scored": len(per_minute),
        "minutes_held": held,
        "share_held": round(held / len(per_minute), 4),
        "replica_seconds": {side: round(v) for side, v in seconds.items()},
        "replica_seconds_total": round(sum(seconds.values())),
        "requests_sent": len(requests),
        "requests_failed": sum(1 for r in requests if r["failed"]),
        "per_minute": per_minute,
    }


def table(recorded: dict[str, Any]) -> str:
    """The docs' table of a recorded local replay: the simulation's (one rule for both), with
    the minutes out of objective and the requests that failed."""
    return replay_table(
        recorded,
        sizing="sizing (local Ray, stand-in engines)",
        extra=(
            ("minutes out", lambda r: str(r["minutes_scored"] - r["minutes_held"])),
            ("requests failed", lambda r: f"{r['requests_failed']} of {r['requests_sent']:,}"),
        ),
    )
