"""Which scored minutes of the local replay miss the TTFT objective on the model alone, whatever
the policy: the replayed requests (tools/latency_replay_scale.py `split`, the replay's own
thinning) through prefill at a fixed number of replicas, each a FIFO server on the fitted model
(`engine_latency`, as the stand-in runs it), routed as Ray Serve 2.58 routes: of two replicas
drawn at random, the one with fewer requests in flight (serve/_private/request_router/
pow_2_router.py). No Serve overhead, no CPU contention: a minute out here is out on every run
of that thinning, a minute near the objective is out on some.

A scored minute is 60 / C seconds of the run and holds about 360 / C replayed requests, each a
prefill of 0.31 s (a 6,000-token prompt, dilated 2 times), where a real minute holds 720
requests of 0.15 s. So a replayed minute's p95 is its second or third highest of a few dozen,
and follows a burst of a few requests that a real minute averages away (docs/verification.md,
"What the compression distorts").

    .venv/bin/python -m tools.latency_replay_bursts --compression 15 --compression 7.5
"""

from __future__ import annotations

import argparse
import random
import sys
from functools import cache
from typing import Any

from serve_extensions.latency_policy import percentile
from tools.latency_replay import WARM_UP_S, Request, fit, workload
from tools.latency_replay_scale import ReplayScale, engine_latency, objectives, split

PHASE_ONE_MINUTES = range(int(WARM_UP_S // 60), 30)  # long prompts: prefill at its 3 replicas


@cache
def _replayed(scale: ReplayScale, thinning_seed: int) -> tuple[dict[str, Any], list[Request]]:
    """The stand-in's latencies and the replayed requests of one thinning, fitted and drawn
    once for all the routing draws that replay them."""
    model, _ = fit()
    kept, _ = split(workload(), scale, thinning_seed)
    return engine_latency(model, scale), kept


def minute_ttfts(
    scale: ReplayScale, replicas: int, routing_seed: int, thinning_seed: int = 11
) -> dict[int, float]:
    """Each minute's TTFT p95 (seconds of the run) with prefill at `replicas`, the replay's
    requests routed by power of two choices drawn from `routing_seed`."""
    latency, kept = _replayed(scale, thinning_seed)
    rng = random.Random(routing_seed)
    free = [0.0] * replicas
    in_flight: list[list[float]] = [[] for _ in range(replicas)]
    by_minute: dict[int, list[float]] = {}
    for request in kept:
        for queue in in_flight:
            queue[:] = [done for done in queue if done > request.at_s]
        chosen = min(rng.sample(range(replicas), 2), key=lambda r: len(in_flight[r]))
        done = (
            max(request.at_s, free[chosen])
            + latency["prefill_step_s"]
            + latency["prefill_s_per_token"] * request.prompt_words
        )
        free[chosen] = done
        in_flight[chosen].append(done)
        # the first token: the prompt's pass, then one decode step
        ttft = done - request.at_s + latency["decode_step_s"]
        by_minute.setdefault(int(request.at_s // scale.minute_s), []).append(ttft)
    return {minute: percentile(values, 95) or 0.0 for minute, values in by_minute.items()}


def minutes_out(
    scale: ReplayScale, replicas: int = 3, routings: int = 20, thinning_seed: int = 11
) -> dict[int, float]:
    """For each minute of the long prompts, the share of `routings` routing draws in which its
    TTFT p95 is over the objective (only minutes out in some draw), for one thinning (the
    replay's is seed 11)."""
    objective = objectives(scale).ttft_s
    counts: dict[int, int] = {}
    for seed in range(routings):
        p95 = minute_ttfts(scale, replicas, seed, thinning_seed)
        for minute in PHASE_ONE_MINUTES:
            if p95.get(minute, 0.0) > objective:
                counts[minute] = counts.get(minute, 0) + 1
    return {minute: count / routings for minute, count in sorted(counts.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compression", type=float, action="append", default=None)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--routings", type=int, default=20)
    parser.add_argument(
        "--thinnings", type=int, default=0, help="also the mean over this many other thinnings"
    )
    args = parser.parse_args(argv)
    for compression in args.compression or [ReplayScale().compression]:
        scale = ReplayScale(compression=compression)
        out = minutes_out(scale, args.replicas, args.routings)
        expected = sum(out.values())
        shares = ", ".join(f"{minute}: {share:.0%}" for minute, share in out.items())
        print(
            f"{compression:g}x, prefill at {args.replicas}, the replay's thinning: minutes "
            f"{PHASE_ONE_MINUTES.start} to {PHASE_ONE_MINUTES.stop - 1} out on TTFT in a share "
            f"of {args.routings} routing draws: {shares or 'none'}; expected minutes out "
            f"{expected:.2f}"
        )
        if args.thinnings:
            others = [
                sum(minutes_out(scale, args.replicas, args.routings, 100 + seed).values())
                for seed in range(args.thinnings)
            ]
            print(
                f"{compression:g}x, {args.thinnings} other thinnings: expected minutes out "
                f"{sum(others) / len(others):.2f} (each: {', '.join(f'{o:.2f}' for o in others)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
