"""The latency policy's decisions (serve_extensions/latency_policy.py), without Ray: each row an
observation of the two sides -> the replicas and the reason per side."""

from __future__ import annotations

import math

import pytest

from serve_extensions.latency_policy import (
    AT_BUDGET,
    AT_MAX,
    AWAITING,
    OVER,
    QUEUE,
    RISING,
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
    side_load,
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
    # no latency reported, or too few samples, under load: held at the target until they come
    # (test_missing_samples_hold_the_side_then_degrade_to_the_queue_rule: for how long)
    (
        seen(2, None, ongoing=20),
        seen(2, 0.02, samples=3, ongoing=100, target=3),
        LIMITS,
        None,
        (2, AWAITING),
        (3, AWAITING),
    ),
    # ... and with no request in flight, nothing to wait for: Serve's queue rule
    (seen(2, None, ongoing=0), seen(3, None, ongoing=0), LIMITS, None, (1, QUEUE), (1, QUEUE)),
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


LOOK_BACK_S = 30.0
HOLD_S = Tuning().hold_look_backs * LOOK_BACK_S  # 60 s


def missing(at_s: float, *, ongoing: float = 40, running: int = 2) -> SideObservation:
    """Decode with no latency reported at `at_s`, 40 requests in flight (the queue rule: 2)."""
    return SideObservation(running, running, ongoing, None, 0, at_s, LOOK_BACK_S)


def reported(at_s: float) -> SideObservation:
    return SideObservation(2, 2, 40, ITL.value_s / 2, 100, at_s, LOOK_BACK_S)


# A sequence of decode observations, each at its time -> the reason of each decision.
HOLD_ROWS = [
    # loaded, no samples: held for two look-backs from the first such decision, then the queue
    ("held, then the queue", [missing(100), missing(159), missing(160)],
     [AWAITING, AWAITING, QUEUE]),
    # samples came within the hold: the latency rule; missing again later starts a new hold
    ("samples end the hold", [missing(0), reported(30), missing(200), missing(259)],
     [AWAITING, WITHIN, AWAITING, AWAITING]),
    # idle (nothing in flight) clears the clock: a load that starts later gets its own hold
    ("idle resets it", [missing(0), missing(50, ongoing=0), missing(100), missing(159)],
     [AWAITING, QUEUE, AWAITING, AWAITING]),
    # no replica running (Serve's cold start): the queue rule at once
    ("cold start", [missing(0, running=0)], [QUEUE]),
]  # fmt: skip


@pytest.mark.parametrize(("why", "sequence", "reasons"), HOLD_ROWS)
def test_missing_samples_hold_the_side_then_degrade_to_the_queue_rule(
    why: str, sequence: list[SideObservation], reasons: list[str]
) -> None:
    memory = Memory()
    got = [
        decide({"prefill": steady("prefill", 1), "decode": seen}, LIMITS, OBJECTIVES, memory)[
            "decode"
        ]
        for seen in sequence
    ]
    assert [d.reason for d in got] == reasons, why
    for seen, decision in zip(sequence, got, strict=True):
        if decision.reason == AWAITING:
            assert decision.replicas == seen.target_replicas
        if decision.reason == QUEUE:
            assert decision.replicas == max(1, math.ceil(seen.ongoing_requests / 32))
    assert HOLD_S == 60.0


def model_itl(floor: float, per_request: float, requests: float, replicas: int) -> float:
    """Decode's ITL on the fitted model's shape: a step plus a part per request of a replica."""
    return floor + per_request * requests / replicas


# Decode's floor seen at a light load, then a heavier one at `running` replicas -> the decision.
# ITL 50 ms, aim 35 ms; step 20 ms, 0.5 ms per request in flight per replica.
FLOOR_ROWS = [
    # 3 replicas at 30 requests: 25 ms; 2 would give 27.5 ms, within the aim: down one
    # (without the floor, all as load: 25 ms x 3 / 2 = 37.5 ms, over the aim, WITHIN)
    ("down with the floor", 3, 30.0, (2, UNDER)),
    # 2 replicas at 30: 27.5 ms; 1 would give 35 ms: at the aim, down
    ("down to the aim", 2, 30.0, (1, UNDER)),
    # 2 replicas at 40: 30 ms; 1 would give 40 ms, over the aim: hold
    ("hold short of the aim", 2, 40.0, (2, WITHIN)),
]


@pytest.mark.parametrize(("why", "running", "requests", "want"), FLOOR_ROWS)
def test_a_scale_down_is_judged_on_the_line_through_the_floor(
    why: str, running: int, requests: float, want: tuple[int, str]
) -> None:
    memory = Memory()
    light = model_itl(0.020, 0.0005, 2.0, 2)  # 20.5 ms at 1 request per replica
    decide({"prefill": steady("prefill", 1), "decode": seen(2, light, ongoing=2.0)}, LIMITS,
           OBJECTIVES, memory)  # fmt: skip
    now = model_itl(0.020, 0.0005, requests, running)
    decision = decide(
        {"prefill": steady("prefill", 1), "decode": seen(running, now, ongoing=requests)},
        LIMITS,
        OBJECTIVES,
        memory,
    )["decode"]
    assert (decision.replicas, decision.reason) == want, why
    # what the line predicts is the model's latency at one replica fewer (it is linear)
    if decision.reason == UNDER:
        assert model_itl(0.020, 0.0005, requests, running - 1) <= AIM * ITL.value_s + 1e-12


@pytest.mark.parametrize(
    ("floor_requests", "want"),
    [
        (90.0, (3, WITHIN)),  # seen at a heavier load: no slope
        (18.0, (3, WITHIN)),  # at 6 per replica, more than half of now's 10: no slope trusted
        (15.0, (2, UNDER)),  # at 5, half: the line through the floor
    ],
)
def test_a_floor_seen_at_more_than_half_the_load_is_not_a_slope(
    floor_requests: float, want: tuple[int, str]
) -> None:
    """The first row of FLOOR_ROWS (3 replicas, 30 requests, 25 ms) with the floor (20 ms) seen
    at other loads: without a trusted slope the rule counts all of the latency as load
    (25 ms x 3 / 2 = 37.5 ms, over the 35 ms aim)."""
    memory = Memory()
    decide({"prefill": steady("prefill", 1), "decode": seen(3, 0.020, ongoing=floor_requests)},
           LIMITS, OBJECTIVES, memory)  # fmt: skip
    decision = decide(
        {"prefill": steady("prefill", 1), "decode": seen(3, 0.025, ongoing=30.0)},
        LIMITS,
        OBJECTIVES,
        memory,
    )["decode"]
    assert (decision.replicas, decision.reason) == want


# Decode's load over time at 2 replicas, its ITL on the model above at each point (floor 20.5 ms
# at 2 requests, t = 0) -> the decision at the last point. Objective 50 ms: scale-up from 45 ms,
# aim 35 ms; the trend spans 2 look-backs (60 s), the lead 4 (120 s), 25 % rise at least.
LEAD_ROWS = [
    # 32 per replica now (36 ms, over the aim), from 20 a minute ago: 56 ahead, 48 ms, over
    # 45 ms before the measured latency is: the replicas that bring 48 ms to the aim,
    # 2 x 27.5 / 14.5 -> 4
    ("rising past scale_up_at: up before the breach", [(30, 40.0), (90, 64.0)], (4, RISING)),
    # 44 per replica (42 ms), from 35: 62 ahead, 51 ms: up, at most x2
    ("rising near the objective", [(30, 70.0), (90, 88.0)], (4, RISING)),
    # 44 per replica (42 ms), from 40: 52 ahead (+18 %), 46 ms: a rise within the noise, hold
    ("a rise under lead_min_rise", [(30, 80.0), (90, 88.0)], (2, WITHIN)),
    # 36 per replica (38 ms), from 30: 48 ahead, 44 ms, under 45 ms: no lead, and one fewer
    # (56 ms at 72 requests) over the aim: hold
    ("rising, predicted under scale_up_at", [(30, 60.0), (90, 72.0)], (2, WITHIN)),
    # 20 per replica (30 ms, under the 35 ms aim), from 1: 58 ahead, 49 ms: no lead below the
    # aim (a queue's noise there is most of its load: the simulation's prefill)
    ("under the aim, one step", [(30, 2.0), (90, 40.0)], (2, WITHIN)),
    # the same rise below the aim in two steps, each past 2 standard deviations of the count
    # before it (2 -> 20: 18 > 2.8; 20 -> 40: 20 > 8.9), a load that keeps rising: 58 ahead,
    # 49 ms: up before the breach, 2 x 28.5 / 14.5 -> 4 (`_sustained`: the turn to long
    # answers, decode under its aim until then on the seventh local run)
    ("under the aim, rising in both halves", [(30, 2.0), (60, 20.0), (90, 40.0)], (4, RISING)),
    # the same rise below the aim, levelled in the second half (36 -> 40: 4 < 12): a step,
    # no lead
    ("under the aim, levelled", [(30, 2.0), (60, 36.0), (90, 40.0)], (2, WITHIN)),
    # falling: no lead; one fewer at 64 requests is 52 ms, over the aim: hold
    ("falling", [(30, 100.0), (90, 64.0)], (2, WITHIN)),
    # the first half of the trend's span: no trend yet, decided on the latency (36 ms)
    ("no trend before half its span", [(20, 64.0)], (2, WITHIN)),
]


def lead_decision(points: list[tuple[float, float]], floor_requests: float = 2.0) -> tuple:
    memory, decision = Memory(), None
    for at_s, requests in [(0.0, floor_requests), *points]:
        decode = SideObservation(2, 2, requests, model_itl(0.020, 0.0005, requests, 2), 100,
                                 now_s=at_s, look_back_s=LOOK_BACK_S)  # fmt: skip
        prefill = SideObservation(1, 1, 1.0, 0.5, 100, now_s=at_s, look_back_s=LOOK_BACK_S)
        decision = decide({"prefill": prefill, "decode": decode}, LIMITS, OBJECTIVES, memory)
    return decision["decode"].replicas, decision["decode"].reason


@pytest.mark.parametrize(("why", "points", "want"), LEAD_ROWS)
def test_a_rising_load_scales_up_before_the_latency_breaches(
    why: str, points: list[tuple[float, float]], want: tuple[int, str]
) -> None:
    assert lead_decision(points) == want, why
    if want[1] == RISING:  # the measured latency alone was within the objective
        assert model_itl(0.020, 0.0005, points[-1][1], 2) <= 0.9 * ITL.value_s


def test_the_lead_needs_a_line_it_can_trust() -> None:
    """The first row with the floor seen at 40 requests (20 per replica, more than half of the
    32 now): no slope to predict on, the side is decided on its measured 36 ms."""
    assert lead_decision([(30, 40.0), (90, 64.0)], floor_requests=40.0) == (2, WITHIN)


def test_the_tuning_defaults_the_lead_rows_assume() -> None:
    tuning = Tuning()
    assert (tuning.trend_look_backs, tuning.lead_look_backs, tuning.lead_min_rise,
            tuning.lead_min_sigmas) == (2.0, 4.0, 0.25, 2.0)  # fmt: skip


@pytest.mark.parametrize(("sigmas", "want"), [(2.0, (3, WITHIN)), (0.0, (6, RISING))])
def test_a_rise_within_a_steady_counts_noise_does_not_lead(
    sigmas: float, want: tuple[int, str]
) -> None:
    """Prefill at 3 replicas on a line of 0.2 s + 0.5 s per request per replica past 0.1 (floor
    seen at 0.3 requests): 2.2 requests, then 3.4 a minute later (0.72 s, over the 0.7 s aim).
    The rise of 1.2 is within 2 standard deviations of a steady Poisson count of 2.2 (2.97):
    no lead, and one fewer (1.0 s) is over the aim. Without the gate the lead predicts 1.12 s
    two minutes on and asks for twice the replicas."""
    tuning = Tuning(lead_min_sigmas=sigmas)
    memory, decision = Memory(), None
    for at_s, requests in [(0.0, 0.3), (30.0, 2.2), (90.0, 3.4)]:
        latency = 0.2 + 0.5 * (requests / 3 - 0.1)
        prefill = SideObservation(3, 3, requests, latency, 100, at_s, LOOK_BACK_S)
        decision = decide({"prefill": prefill, "decode": steady("decode", 1)}, LIMITS,
                          OBJECTIVES, memory, tuning=tuning)  # fmt: skip
    assert (decision["prefill"].replicas, decision["prefill"].reason) == want


# ---- the engines' requests as the side's load (latency_policy.side_load)

# Serve's requests in flight, the engines' requests (None: no replica reports them), the
# replicas whose report is fresh and those that have reported at all (None: not known), at 2
# running replicas -> the load the policy reads.
LOAD_ROWS = [
    ("absent: Serve's count", 40.0, None, 0, None, 40.0),
    ("present: the engines' count", 4.0, 150.0, 2, 2, 150.0),
    ("stale: one report left out, the other's mean for both", 4.0, 75.0, 1, 2, 150.0),
    ("who reported not known: the mean for every running replica", 4.0, 75.0, 1, None, 150.0),
    # the tenth local replay, decode's second replica up: 29 on the one engine, not 58
    ("one not reported yet: just started, counted at none", 4.0, 29.0, 1, 1, 29.0),
    ("more reported than run (one stopping): the running ones", 4.0, 75.0, 1, 3, 150.0),
    ("zero: idle engines, whatever Serve counts", 40.0, 0.0, 2, 2, 0.0),
]


@pytest.mark.parametrize(("why", "ongoing", "engine", "fresh", "reporting", "want"), LOAD_ROWS)
def test_the_load_is_the_engines_requests_where_reported(
    why: str, ongoing: float, engine: float | None, fresh: int, reporting: int | None, want: float
) -> None:
    observation = SideObservation(
        2, 2, ongoing, engine_requests=engine, engine_replicas=fresh, reporting_replicas=reporting
    )
    assert side_load(observation) == want, why


def engine_missing(
    at_s: float, ongoing: float, engine: float | None, fresh: int
) -> SideObservation:
    """Decode at 2 replicas without latency samples, with Serve's and the engines' counts."""
    return SideObservation(2, 2, ongoing, None, 0, at_s, LOOK_BACK_S, engine, fresh)


# Decode without samples, first seen at t = 0 and again past the hold -> (replicas, reason) of
# each decision: the queue fallback sizes on the load (target 32 per replica).
FALLBACK_ROWS = [
    # Serve's 4 streams, the engines' 150 sequences: 5 replicas, where Serve's count gives 1
    ("present", 4.0, 150.0, 2, [(2, AWAITING), (5, QUEUE)]),
    ("absent", 40.0, None, 0, [(2, AWAITING), (2, QUEUE)]),
    ("stale", 4.0, 75.0, 1, [(2, AWAITING), (5, QUEUE)]),
    # Serve counts 40 (decode waiting on prefill's work), the engines none: idle, no hold, the
    # queue rule at the minimum
    ("zero", 40.0, 0.0, 2, [(1, QUEUE), (1, QUEUE)]),
]


@pytest.mark.parametrize(("why", "ongoing", "engine", "fresh", "want"), FALLBACK_ROWS)
def test_the_hold_and_the_queue_fallback_read_the_engines_load(
    why: str, ongoing: float, engine: float | None, fresh: int, want: list[tuple[int, str]]
) -> None:
    memory = Memory()
    got = []
    for at_s in (0.0, HOLD_S):
        decode = engine_missing(at_s, ongoing, engine, fresh)
        decision = decide(
            {"prefill": steady("prefill", 1), "decode": decode}, LIMITS, OBJECTIVES, memory
        )["decode"]
        got.append((decision.replicas, decision.reason))
    assert got == want, why


# The first LEAD_ROWS row (decode's sequences 2 -> 40 -> 64 at 2 replicas, ITL on the model)
# with Serve's count flat at 4 (the local replay: Serve sees the streams, not the companions)
# -> the decision at the last point.
ENGINE_LEAD_ROWS = [
    ("present: the lead sees the rise", "present", (4, RISING)),
    ("absent: Serve's flat count, no lead", "absent", (2, WITHIN)),
    ("stale: one replica's report, the mean for both", "stale", (4, RISING)),
]


@pytest.mark.parametrize(("why", "how", "want"), ENGINE_LEAD_ROWS)
def test_the_lead_and_the_floor_line_read_the_engines_load(
    why: str, how: str, want: tuple[int, str]
) -> None:
    memory, decision = Memory(), None
    for at_s, sequences in [(0.0, 2.0), (30.0, 40.0), (90.0, 64.0)]:
        engine, fresh = {"present": (sequences, 2), "absent": (None, 0),
                         "stale": (sequences / 2, 1)}[how]  # fmt: skip
        decode = SideObservation(2, 2, 4.0, model_itl(0.020, 0.0005, sequences, 2), 100,
                                 at_s, LOOK_BACK_S, engine, fresh)  # fmt: skip
        prefill = SideObservation(1, 1, 1.0, 0.5, 100, now_s=at_s, look_back_s=LOOK_BACK_S)
        decision = decide({"prefill": prefill, "decode": decode}, LIMITS, OBJECTIVES, memory)
    assert (decision["decode"].replicas, decision["decode"].reason) == want, why


@pytest.mark.parametrize(
    ("engine", "want"),
    [
        (0.0, (1, UNDER)),  # samples, and nothing in the engines: one fewer carries nothing
        (None, (2, WITHIN)),  # Serve's 40: one fewer would double 25 ms, over the 35 ms aim
    ],
)
def test_a_side_with_samples_and_no_load_comes_down(
    engine: float | None, want: tuple[int, str]
) -> None:
    """Decode at 2 replicas, ITL 25 ms (aim 35 ms) from its window's streams, its engines' count
    0 (short, sparse requests between the record points)."""
    decode = SideObservation(2, 2, 40.0, 0.025, 100, engine_requests=engine,
                             engine_replicas=0 if engine is None else 2)  # fmt: skip
    decision = decide(
        {"prefill": steady("prefill", 1), "decode": decode}, LIMITS, OBJECTIVES, Memory()
    )["decode"]
    assert (decision.replicas, decision.reason) == want


def test_a_scale_down_on_the_floor_reads_the_engines_load() -> None:
    """FLOOR_ROWS' first row (floor 20.5 ms at 2 sequences, now 25 ms at 30 on 3 replicas:
    down to 2) with Serve counting 300 at both points (prefill's work on decode): on the
    engines' count the line is the model's; on Serve's the floor's load is now's, no slope,
    and all of the latency counts as load (37.5 ms over the aim): held."""
    outcomes = {}
    for engine in (True, False):
        memory = Memory()
        for running, sequences in ((2, 2.0), (3, 30.0)):
            decode = SideObservation(
                running, running, 300.0, model_itl(0.020, 0.0005, sequences, running), 100,
                engine_requests=sequences if engine else None,
                engine_replicas=running if engine else 0,
            )  # fmt: skip
            decision = decide(
                {"prefill": steady("prefill", 1), "decode": decode}, LIMITS, OBJECTIVES, memory
            )["decode"]
        outcomes[engine] = (decision.replicas, decision.reason)
    assert outcomes == {True: (2, UNDER), False: (3, WITHIN)}


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
