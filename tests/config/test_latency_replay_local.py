"""The local latency-policy replay's scaling and scoring (tools/latency_replay_scale.py,
tools/latency_replay_score.py, the stand-in's tests/e2e/latency_model.py): what the run changes
keeps each side's load, in replicas needed, as the fitted model has it; a minute holds only
when both of its percentiles are within their objectives; replica-seconds are Serve's replica
counts integrated over the scored window."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tools.latency_replay import (
    DURATION_S,
    HANDOFF_S_PER_TOKEN,
    PHASES,
    STARTUP_S,
    WARM_UP_S,
    Objectives,
    fit,
    workload,
)
from tools.latency_replay_scale import (
    PUSH_INTERVAL_ENV,
    REPLICA_START_S,
    ReplayScale,
    answer_tokens,
    engine_latency,
    objectives,
    ongoing_divisor,
    ray_environment,
    replayed,
    serve_timing,
    split,
)
from tools.latency_replay_score import covered, minutes, replica_seconds, score

ROOT = Path(__file__).resolve().parents[2]
SCALE = ReplayScale()
OBJECTIVES = Objectives(ttft_s=1.6, itl_s=0.02, percentile=95)


@pytest.fixture(scope="module")
def stand_in_model() -> ModuleType:
    """The stand-in's module (tests/e2e: the e2e venv's; it imports nothing of Ray)."""
    spec = importlib.util.spec_from_file_location(
        "latency_model", ROOT / "tests" / "e2e" / "latency_model.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["latency_model"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["latency_model"]
    return module


@pytest.fixture(scope="module")
def stand_in(stand_in_model: ModuleType) -> Any:
    """The stand-in's model as the replay sets it."""
    model, _ = fit()
    return stand_in_model.EngineLatency(**engine_latency(model, SCALE))


# ---- the scale keeps the fitted engines' curves


@pytest.mark.parametrize("sequences", [1, 8, 75, 150])
def test_a_decode_replicas_sequences_each_cost_a_real_sequence_dilated(
    stand_in: Any, sequences: int
) -> None:
    """Streams and companions together are the real count (latency_model.py Companions): each
    costs one real sequence, in D times the real time. (Before the companions each replayed
    stream cost C x D sequences, and a replica's 2 or 3 stood for 75.)"""
    model, _ = fit()
    assert stand_in.step_time(sequences) == pytest.approx(SCALE.dilation * model.itl(sequences))


def test_without_companions_a_stream_costs_decode_the_sequences_it_stands_for() -> None:
    """The 2026-12-07 run's rule, which its record is checked against."""
    model, _ = fit()
    before = ReplayScale(companions=False)
    latency = engine_latency(model, before)
    assert latency["decode_s_per_running"] == pytest.approx(
        before.dilation * before.thinning * model.per_seq_s
    )
    assert split(workload()[:3000], before)[1] == []


def test_a_decode_replica_runs_the_real_sequence_count_by_littles_law() -> None:
    """Replayed arrivals (C x the real rate, over C x D) and their companions (C x D - 1 as
    many), each answer / (C x D) tokens at D x the real step, give the real count: real rate x
    real duration."""
    model, _ = fit()
    real_rate, real_answer, running = 6.0, 1500, 75  # one of two decode replicas, long answers
    itl = model.itl(running)
    replayed_rate = real_rate * SCALE.compression / SCALE.thinning
    companion_rate = replayed_rate * (SCALE.thinning - 1)
    duration = real_answer / SCALE.answer_divisor * SCALE.dilation * itl
    assert (replayed_rate + companion_rate) * duration == pytest.approx(
        real_rate * real_answer * itl
    )


def test_the_requests_thinned_away_are_decodes_companions_at_their_own_times() -> None:
    real = workload()
    kept, companions = split(real, SCALE)
    assert kept == replayed(real, SCALE)
    assert len(kept) + len(companions) == len(real)
    assert len(companions) == pytest.approx(len(real) * (1 - 1 / SCALE.thinning), rel=0.01)
    # Every request is one or the other, at its compressed time, its answer shortened alike.
    both = sorted([(r.at_s, r.answer_tokens) for r in kept] + companions)
    assert both == [(r.arrival / SCALE.compression, answer_tokens(r.answer, SCALE)) for r in real]
    assert split(real, ReplayScale(companions=False))[1] == []


@pytest.mark.parametrize("members", [["a"], ["a", "b"], ["a", "b", "c"]])
def test_each_companion_goes_to_one_running_decode_replica_about_evenly(
    stand_in_model: ModuleType, members: list[str]
) -> None:
    shares = {m: sum(stand_in_model.assigned(i, members, m) for i in range(3000)) for m in members}
    assert sum(shares.values()) == 3000
    assert all(abs(n - 3000 / len(members)) < 0.06 * 3000 for n in shares.values())
    assert not any(stand_in_model.assigned(i, members, "stopped") for i in range(100))
    # The same split whatever order the list comes in.
    reordered = list(reversed(members))
    assert all(
        stand_in_model.assigned(i, members, m) == stand_in_model.assigned(i, reordered, m)
        for i in range(100) for m in members
    )  # fmt: skip


def test_a_replica_takes_its_companions_as_their_time_comes(stand_in_model: ModuleType) -> None:
    timeline = [(0.5, 10), (1.0, 20), (1.5, 30), (2.0, 40)]
    feed = stand_in_model.CompanionFeed(100.0, timeline)
    alone = ["me"]
    assert feed.due(100.4, alone, "me") == []
    assert feed.due(101.2, alone, "me") == [(100.5, 10), (101.0, 20)]
    assert feed.due(101.2, alone, "me") == []  # each once
    assert feed.due(110.0, ["other"], "me") == []  # not running: none, and they are gone
    assert feed.due(111.0, alone, "me") == []


def test_companions_run_their_tokens_at_the_step_time_of_everything_running(
    stand_in_model: ModuleType,
) -> None:
    """Two companions of 10 tokens from t = 0; a step takes 10 ms per sequence running: 20 ms
    alone, so both end at 0.2 s; beside one stream of the replica's own, 30 ms, at 0.3 s."""
    for others, ends_at in [(0, 0.2), (1, 0.3)]:
        companions = stand_in_model.Companions(lambda running: 0.01 * max(1, running))
        companions.add(0.0, 10)
        companions.add(0.0, 10)
        assert companions.running(0.0, others) == 2
        assert companions.running(ends_at - 0.001, others) == 2
        assert companions.running(ends_at + 0.001, others) == 0


def test_a_companion_starts_when_it_is_due_and_the_last_ends_first(
    stand_in_model: ModuleType,
) -> None:
    companions = stand_in_model.Companions(lambda running: 0.01)  # one step: 10 ms
    companions.add(1.0, 5)
    companions.add(0.0, 20)
    assert companions.running(0.1, 0) == 1
    assert companions.running(0.21, 0) == 0  # its 20 steps were done at 0.2 s
    assert companions.running(0.99, 0) == 0
    assert companions.running(1.0, 0) == 1
    assert companions.running(1.04, 0) == 1
    assert companions.running(1.06, 0) == 0  # 5 steps from 1.0 s


def test_companions_in_steady_state_hold_arrival_rate_times_duration(
    stand_in_model: ModuleType,
) -> None:
    """Little's law on the clock: one arrival every 0.1 s of 300 tokens at 5 ms a step: 1.5 s
    each, 15 running."""
    companions = stand_in_model.Companions(lambda running: 0.005)
    for i in range(400):
        companions.add(i * 0.1, 300)
    seen = [companions.running(t / 100, 0) for t in range(2000, 3000)]
    assert sum(seen) / len(seen) == pytest.approx(15, abs=0.5)


@pytest.mark.parametrize("words", [2, 100, 600, 2400])
def test_a_replayed_prompt_takes_the_dilated_time_of_the_real_prompt_it_stands_for(
    stand_in: Any, words: int
) -> None:
    model, _ = fit()
    real_tokens = words * SCALE.prompt_divisor
    assert stand_in.prefill_time(words) == pytest.approx(
        SCALE.dilation * (model.step_s + real_tokens / model.prefill_tokens_per_s)
    )
    assert stand_in.handoff_time(words) == pytest.approx(
        SCALE.dilation * real_tokens * HANDOFF_S_PER_TOKEN
    )


def test_engines_start_in_what_the_compressed_real_start_leaves_after_the_replicas_own() -> None:
    model, _ = fit()
    assert engine_latency(model, SCALE)["start_s"] == {
        side: max(0.0, seconds / SCALE.compression - REPLICA_START_S)
        for side, seconds in STARTUP_S.items()
    }
    slower = ReplayScale(compression=5)
    assert engine_latency(model, slower)["start_s"]["prefill"] == pytest.approx(
        238 / 5 - REPLICA_START_S
    )


@pytest.mark.parametrize("compression", [7.5, 5.0])
def test_below_15x_a_replica_serves_the_real_engines_start_after_serve_starts_it(
    compression: float,
) -> None:
    """The replica's own start on this machine and the stand-in engine's together are the real
    engine's start in the workload's time (STARTUP_S: 106 s decode, 238 s prefill)."""
    model, _ = fit()
    scale = ReplayScale(compression=compression)
    started = engine_latency(model, scale)["start_s"]
    for side, seconds in STARTUP_S.items():
        assert (REPLICA_START_S + started[side]) * compression == pytest.approx(seconds), side


def test_at_15x_the_replicas_own_start_is_longer_than_a_real_decode_engines() -> None:
    """What the compression distorts (tools/latency_replay_scale.py change 1): at 15x the
    stand-in's engine starts at once and the replica's own 10.7 s are 160 s of the workload's
    time, where the real decode engine takes 106 s."""
    model, _ = fit()
    assert engine_latency(model, SCALE)["start_s"]["decode"] == 0.0
    assert REPLICA_START_S * SCALE.compression > STARTUP_S["decode"]


def test_a_negative_replica_start_is_refused() -> None:
    with pytest.raises(ValueError, match="not negative"):
        ReplayScale(replica_start_s=-1.0)


def test_the_objectives_are_dilated_as_each_requests_times_are() -> None:
    assert objectives(SCALE) == Objectives(ttft_s=1.6, itl_s=0.02, percentile=95)


def test_the_replayed_workload_is_the_simulations_thinned_compressed_and_shortened() -> None:
    real = workload()
    kept = replayed(real, SCALE)
    assert len(kept) == pytest.approx(len(real) / SCALE.thinning, rel=0.05)
    assert max(r.at_s for r in kept) < DURATION_S / SCALE.compression
    assert min(r.answer_tokens for r in kept) >= 2
    # Each phase's mean lengths, divided (the three-minute blends left out).
    for phase, end in zip(PHASES, [*(p.start_s for p in PHASES[1:]), DURATION_S], strict=True):
        start = (phase.start_s + 180) / SCALE.compression
        inside = [r for r in kept if start <= r.at_s < end / SCALE.compression]
        prompt = sum(r.prompt_words for r in inside) / len(inside)
        assert prompt == pytest.approx(phase.prompt_tokens / SCALE.prompt_divisor, rel=0.15)
    assert replayed(real, SCALE) == kept  # seeded


def test_serve_timing_compresses_the_control_loops_durations_and_nothing_else() -> None:
    config = {
        "autoscaling_config": {"min_replicas": 1, "max_replicas": 3, "upscale_delay_s": 60.0,
                               "downscale_delay_s": 600.0, "target_ongoing_requests": 32},
        "graceful_shutdown_wait_loop_s": 2,
        "graceful_shutdown_timeout_s": 300,
        "health_check_period_s": 10,
    }  # fmt: skip
    timed = serve_timing(config, SCALE)
    assert timed["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 3,
        "target_ongoing_requests": 32,
        "upscale_delay_s": 4.0,
        "downscale_delay_s": 40.0,
        "look_back_period_s": 2.0,  # Serve's default 30 s
    }
    assert timed["graceful_shutdown_wait_loop_s"] == pytest.approx(2 / 15)
    assert timed["graceful_shutdown_timeout_s"] == 20
    assert timed["health_check_period_s"] == 10
    assert config["autoscaling_config"]["upscale_delay_s"] == 60.0  # the input is left alone


def test_serve_timing_compresses_serves_defaults_where_a_config_sets_none() -> None:
    timed = serve_timing({"autoscaling_config": {"min_replicas": 1}}, SCALE)
    assert timed["autoscaling_config"] == {
        "min_replicas": 1,
        "upscale_delay_s": 2.0,
        "downscale_delay_s": 40.0,
        "look_back_period_s": 2.0,
    }


def test_metric_pushes_are_compressed() -> None:
    assert ray_environment(SCALE) == dict.fromkeys(PUSH_INTERVAL_ENV, f"{10 / 15:g}")


@pytest.mark.parametrize(
    "factors",
    [{"compression": 0.5}, {"dilation": 0}, {"prompt_divisor": 0.9}],
    ids=["compression-below-1", "dilation-0", "prompt-divisor-below-1"],
)
def test_a_scale_that_would_stretch_time_or_lengths_is_refused(factors: dict) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ReplayScale(**factors)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", None)],
    ids=["unset", "empty"],
)
def test_the_stand_in_runs_its_plain_mode_without_a_model(
    stand_in_model: ModuleType, value: str | None, expected: None
) -> None:
    assert stand_in_model.EngineLatency.from_env(value) is expected


def test_a_model_with_a_negative_time_is_refused(stand_in_model: ModuleType) -> None:
    model, _ = fit()
    latency = {**engine_latency(model, SCALE), "decode_s_per_running": -0.001}
    with pytest.raises(ValueError, match="not negative"):
        stand_in_model.EngineLatency(**latency)


def test_the_model_goes_to_the_stand_in_and_back_unchanged(stand_in_model: ModuleType) -> None:
    model, _ = fit()
    latency = stand_in_model.EngineLatency(**engine_latency(model, SCALE))
    assert stand_in_model.EngineLatency.from_env(latency.to_env()) == latency


# ---- scoring

FIRST = int(WARM_UP_S // 60)


def _request(minute: int, ttft: float | None, itl: float | None, failed: bool = False) -> dict:
    return {"at_s": (minute + 0.5) * SCALE.minute_s, "ttft_s": ttft, "itl_s": itl,
            "failed": failed}  # fmt: skip


@pytest.mark.parametrize(
    ("requests", "held"),
    [
        ([_request(FIRST, 1.0, 0.015)] * 20, True),
        ([_request(FIRST, 1.0, 0.015)] * 19 + [_request(FIRST, 9.0, 0.015)], True),  # p95 of 20
        ([_request(FIRST, 1.0, 0.015)] * 18 + [_request(FIRST, 9.0, 0.015)] * 2, False),
        ([_request(FIRST, 1.0, 0.015)] * 18 + [_request(FIRST, 1.0, 0.05)] * 2, False),
        ([_request(FIRST, 1.0, 0.015)] * 18 + [_request(FIRST, None, None, True)] * 2, False),
        ([_request(FIRST, 1.0, None)] * 5, True),  # no stream to time: held on ITL
        ([_request(FIRST, 1.6, 0.02)] * 5, True),  # at the objective
        ([], True),  # nothing sent
    ],
    ids=["within", "one-late-of-20", "two-late-of-20", "itl-over", "two-failed", "no-itl",
         "at-objective", "empty"],
)  # fmt: skip
def test_a_minute_holds_when_both_percentiles_are_within_the_objectives(
    requests: list[dict], held: bool
) -> None:
    (first, *rest) = minutes(requests, OBJECTIVES, SCALE)
    assert first["minute"] == FIRST
    assert first["held"] is held
    assert len(rest) == int(DURATION_S // 60) - FIRST - 1


def test_a_request_counts_in_the_minute_it_was_sent_in() -> None:
    late = _request(FIRST + 1, 9.0, 0.015)
    scored = minutes([_request(FIRST, 1.0, 0.015), late], OBJECTIVES, SCALE)
    assert [m["held"] for m in scored[:2]] == [True, False]
    assert [m["requests"] for m in scored[:2]] == [1, 1]


def test_replica_seconds_integrate_serves_counts_over_the_scored_window_in_workload_time() -> None:
    start, stop = WARM_UP_S / SCALE.compression, DURATION_S / SCALE.compression
    samples = [
        (0.0, {"prefill": 3, "decode": 1}),  # before the window: counts from its start
        (start + 10, {"prefill": 2, "decode": 2}),
        (stop + 5, {"prefill": 0, "decode": 0}),
    ]
    seconds = replica_seconds(samples, SCALE)
    assert seconds["prefill"] == pytest.approx((3 * 10 + 2 * (stop - start - 10)) * 15)
    assert seconds["decode"] == pytest.approx((1 * 10 + 2 * (stop - start - 10)) * 15)
    assert covered(samples, SCALE)
    assert not covered(samples[1:], SCALE)
    assert not covered([], SCALE)


def test_a_score_counts_the_minutes_held_and_the_replica_seconds() -> None:
    stop = DURATION_S / SCALE.compression
    samples = [(0.0, {"prefill": 1, "decode": 1}), (stop, {"prefill": 1, "decode": 1})]
    result = score([_request(FIRST, 9.0, 0.015)], samples, OBJECTIVES, SCALE)
    assert result["minutes_scored"] == int(DURATION_S // 60) - FIRST
    assert result["minutes_held"] == result["minutes_scored"] - 1
    assert result["replica_seconds_total"] == round(2 * (DURATION_S - WARM_UP_S))
    assert math.isclose(result["share_held"], round(result["minutes_held"] / 80, 4))


def test_decodes_target_in_flight_shrinks_with_its_streams_and_prefills_stays() -> None:
    """Little's law: prefill's requests in flight are arrivals x time, D times fewer arrivals
    each D times longer; decode's, as Serve counts them, are its streams, one per `thinning`
    real requests (the companions are not Serve's)."""
    assert ongoing_divisor("prefill", SCALE) == 1.0
    assert ongoing_divisor("decode", SCALE) == SCALE.thinning
