"""The latency policy's decisions (serve_extensions/latency_policy.py), without Ray: each row an
observation of the two sides -> the replicas and the reason per side."""

from __future__ import annotations

import math

import pytest

from serve_extensions.latency_policy import (
    AT_BUDGET,
    AT_MAX,
    OVER,
    QUEUE,
    STARTING,
    UNDER,
    WITHIN,
    Memory,
    Objective,
    SideLimits,
    SideObservation,
    Tuning,
    decide,
    percentile,
)

TTFT = Objective(95, 1.0)
ITL = Objective(95, 0.050)
OBJECTIVES = {"prefill": TTFT, "decode": ITL}
LIMITS = {
    "prefill": SideLimits(1, 8, 1, 8, 4),
    "decode": SideLimits(1, 8, 1, 8, 32),
}
# Decode as DP groups of 4 Serve replicas (ranks) of 2 GPUs: min 1 and max 4 groups.
DP_LIMITS = {**LIMITS, "decode": SideLimits(4, 16, 4, 8, 32)}
AIM = Tuning().aim


def seen(running: int, latency: float | None, *, target: int | None = None, ongoing: float = 10,
         samples: int = 100) -> SideObservation:  # fmt: skip
    return SideObservation(
        running, running if target is None else target, ongoing, latency, samples
    )


def steady(side: str, running: int) -> SideObservation:
    """A side holding its objective at half of it."""
    return seen(running, OBJECTIVES[side].value_s / 2)


# (prefill, decode, limits, budget) -> (prefill replicas, reason), (decode replicas, reason)
ROWS = [
    # within the objective, and one group fewer would leave the aim: hold
    (seen(2, 0.7), seen(2, 0.035), LIMITS, None, (2, WITHIN), (2, WITHIN)),
    # over: grow by the model, at least one more
    (seen(2, 1.5), steady("decode", 2), LIMITS, None, (4, OVER), (2, WITHIN)),
    (seen(3, 1.1), steady("decode", 2), LIMITS, None, (5, OVER), (2, WITHIN)),
    # far over: at most max_step_up times
    (seen(2, 9.0), seen(2, 0.2), LIMITS, None, (4, OVER), (4, OVER)),
    # down one group at a time
    (seen(6, 0.1), seen(6, 0.005), LIMITS, None, (5, UNDER), (5, UNDER)),
    # no latency reported, or too few samples: Serve's queue rule
    (
        seen(2, None, ongoing=20),
        seen(2, 0.02, samples=3, ongoing=100),
        LIMITS,
        None,
        (5, QUEUE),
        (4, QUEUE),
    ),
    # replicas starting: hold the target, whatever the latency says
    (seen(2, 3.0, target=4), steady("decode", 2), LIMITS, None, (4, STARTING), (2, WITHIN)),
    # bounds
    (seen(8, 2.0), seen(1, 0.01), LIMITS, None, (8, AT_MAX), (1, WITHIN)),
    # DP decode: whole groups of 4 replicas; a group short of a rank does not count
    (steady("prefill", 1), seen(8, 0.075), DP_LIMITS, None, (1, WITHIN), (16, OVER)),
    (steady("prefill", 1), seen(7, 0.075), DP_LIMITS, None, (1, WITHIN), (8, OVER)),
    (steady("prefill", 1), seen(12, 0.010), DP_LIMITS, None, (1, WITHIN), (8, UNDER)),
    # budget: the side further over its objective gets the GPUs (prefill 2x over, decode 1.2x)
    (seen(2, 2.0), seen(2, 0.06), LIMITS, 40, (4, OVER), (1, AT_BUDGET)),
]


@pytest.mark.parametrize(("prefill", "decode", "limits", "budget", "want_p", "want_d"), ROWS)
def test_each_observation_gives_the_replicas_and_reason_per_side(
    prefill: SideObservation,
    decode: SideObservation,
    limits: dict[str, SideLimits],
    budget: int | None,
    want_p: tuple[int, str],
    want_d: tuple[int, str],
) -> None:
    decisions = decide({"prefill": prefill, "decode": decode}, limits, OBJECTIVES, Memory(), budget)
    got = {side: (d.replicas, d.reason) for side, d in decisions.items()}
    assert got == {"prefill": want_p, "decode": want_d}


def test_the_budget_is_never_exceeded_and_each_side_keeps_a_group() -> None:
    for budget in range(16, 129, 8):
        decisions = decide(
            {"prefill": seen(4, 5.0), "decode": seen(4, 0.5)}, LIMITS, OBJECTIVES, Memory(), budget
        )
        used = sum(d.replicas * LIMITS[s].group_gpus for s, d in decisions.items())
        assert used <= budget
        assert min(d.replicas for d in decisions.values()) >= 1


def test_a_scale_down_is_not_followed_by_a_scale_up_when_latency_follows_the_model() -> None:
    """Latency = floor + k x load per replica: after the policy removes a replica, the latency
    it then observes is within the objective, so it never flaps."""
    memory = Memory()
    floor, load = 0.005, 60.0
    running, history = 8, []
    for _ in range(12):
        itl = floor + 0.0004 * load / running
        decision = decide(
            {"prefill": steady("prefill", 1), "decode": seen(running, itl)},
            LIMITS,
            OBJECTIVES,
            memory,
        )["decode"]
        history.append(decision.reason)
        assert floor + 0.0004 * load / decision.replicas <= ITL.value_s
        running = decision.replicas
    assert OVER not in history
    assert history[-1] == WITHIN


def test_the_floor_is_the_lowest_latency_seen_and_makes_growth_larger() -> None:
    """Only the latency above the floor grows with the load, so with a floor learned the policy
    adds more replicas for the same latency; without one (or a floor too close to the aim) it
    counts all of the latency as load."""
    memory = Memory()
    decide({"prefill": steady("prefill", 1), "decode": seen(2, 0.010)}, LIMITS, OBJECTIVES, memory)
    assert memory.floor_s["decode"] == 0.010
    with_floor = decide(
        {"prefill": steady("prefill", 1), "decode": seen(2, 0.050)}, LIMITS, OBJECTIVES, memory
    )["decode"]
    without = decide(
        {"prefill": steady("prefill", 1), "decode": seen(2, 0.050)}, LIMITS, OBJECTIVES, Memory()
    )["decode"]
    aim = AIM * ITL.value_s
    assert with_floor.replicas == math.ceil(2 * (0.050 - 0.010) / (aim - 0.010))  # 4
    assert without.replicas == math.ceil(2 * 0.050 / aim)  # 3
    assert with_floor.replicas > without.replicas


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 95, None),
        ([3.0], 99, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        (list(range(1, 101)), 95, 95),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected
