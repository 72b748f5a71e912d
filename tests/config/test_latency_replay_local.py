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
    engine_latency,
    objectives,
    ongoing_divisor,
    ray_environment,
    replayed,
    serve_timing,
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


@pytest.mark.parametrize("streams", [1, 2, 4, 8])
def test_a_replayed_stream_count_has_the_dilated_itl_of_the_real_count_it_stands_for(
    stand_in: Any, streams: int
) -> None:
    model, _ = fit()
    real = model.itl(streams * SCALE.answer_divisor)
    assert stand_in.step_time(streams) == pytest.approx(SCALE.dilation * real)


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
    each D times longer; decode's are its streams, answer_divisor times fewer."""
    assert ongoing_divisor("prefill", SCALE) == 1.0
    assert ongoing_divisor("decode", SCALE) == SCALE.answer_divisor
