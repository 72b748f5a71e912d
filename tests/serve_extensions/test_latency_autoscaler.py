"""The latency policy behind Ray Serve 2.58's application-level autoscaling (the installed Ray):
Serve's own wrapper around it applies each side's delays, the ingress keeps Serve's queue rule,
and the replicas' custom metrics are the latency inputs."""

from __future__ import annotations

from typing import Any

import pytest
import ray.serve.autoscaling_policy as serve_policy
from ray.serve._private.common import DeploymentID, ReplicaID, TimeStampedValue
from ray.serve.autoscaling_policy import _apply_app_level_autoscaling_config
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from serve_extensions.latency_autoscaler import (
    ENGINE_REQUESTS_METRIC,
    LATENCY_METRIC,
    SAMPLES_METRIC,
    LatencyObjectivePolicy,
    observe,
)
from serve_extensions.latency_policy import SIDES, Decision, SideObservation
from tests.policy_lines import policy_lines

APP = "pd-llm"
IDS = {
    "prefill": DeploymentID(name="Prefill:qwen", app_name=APP),
    "decode": DeploymentID(name="Decode:qwen", app_name=APP),
    "ingress": DeploymentID(name="OpenAiIngress", app_name=APP),
}
KWARGS: dict[str, Any] = {
    "objectives": {
        "prefill": {"percentile": 95, "value_ms": 1000},
        "decode": {"percentile": 95, "value_ms": 50},
    },
    "limits": {
        side: {
            "min_replicas": 1,
            "max_replicas": 8,
            "group_size": 1,
            "group_gpus": 8,
            "target_ongoing_requests": target,
        }
        for side, target in (("prefill", 4), ("decode", 32))
    },
}


def context(
    name: str,
    replicas: int,
    requests: float,
    *,
    latency: float | None = None,
    now: float = 0.0,
    state: dict | None = None,
    upscale_delay_s: float = 30,
    engine: list[tuple[float, float | None]] | None = None,
) -> AutoscalingContext:
    """engine: per replica, its engine requests (look-back average) and the time of its newest
    raw point (None: none in the context)."""
    running = [ReplicaID(f"r{i}", IDS[name]) for i in range(replicas)]
    metrics: dict[str, dict[ReplicaID, float]] = {}
    raw: dict[str, dict[ReplicaID, list[TimeStampedValue]]] = {}
    if engine:
        pairs = list(zip(running, engine, strict=False))
        metrics[ENGINE_REQUESTS_METRIC] = {replica: value for replica, (value, _) in pairs}
        raw[ENGINE_REQUESTS_METRIC] = {
            replica: [TimeStampedValue(newest - 5.0, value), TimeStampedValue(newest, value)]
            for replica, (value, newest) in pairs
            if newest is not None
        }
    if latency is not None and name in SIDES:
        metrics[LATENCY_METRIC[name]] = {replica: latency for replica in running}
        metrics[SAMPLES_METRIC] = {replica: 50 for replica in running}
    config = AutoscalingConfig(
        min_replicas=1,
        max_replicas=8,
        target_ongoing_requests=4,
        upscale_delay_s=upscale_delay_s,
        downscale_delay_s=300,
    )
    return AutoscalingContext(
        deployment_id=IDS[name],
        deployment_name=IDS[name].name,
        app_name=APP,
        current_num_replicas=replicas,
        target_num_replicas=replicas,
        running_replicas=running,
        total_num_requests=requests,
        total_queued_requests=0,
        aggregated_metrics=metrics,
        raw_metrics=raw,
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=8,
        policy_state=dict(state or {}),
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=now,
        config=config,
        total_pending_async_requests=0,
    )


def test_a_side_over_its_objective_grows_after_serves_upscale_delay_and_not_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Serve's wrapper (autoscaling_policy.py _apply_app_level_autoscaling_config) holds the
    policy's wish until the side's upscale_delay_s (30 s) has passed: the cool-down."""
    policy = _apply_app_level_autoscaling_config(LatencyObjectivePolicy(**KWARGS))
    states: dict = {}
    seen = []
    for second in (0, 10, 20, 30):
        contexts = {
            IDS["prefill"]: context("prefill", 2, 8, latency=2.0, state=states.get(IDS["prefill"])),
            IDS["decode"]: context("decode", 2, 40, latency=0.03, state=states.get(IDS["decode"])),
            IDS["ingress"]: context("ingress", 1, 4),
        }
        monkeypatch.setattr(serve_policy.time, "time", lambda second=second: 1000.0 + second)
        decisions, states = policy(contexts)
        seen.append(decisions[IDS["prefill"]])
    assert seen == [2, 2, 2, 4]


def test_the_ingress_keeps_serves_queue_rule() -> None:
    policy = LatencyObjectivePolicy(**KWARGS)
    contexts = {
        IDS["prefill"]: context("prefill", 1, 2, latency=0.5),
        IDS["decode"]: context("decode", 1, 10, latency=0.02),
        IDS["ingress"]: context("ingress", 2, 24),
    }
    decisions, _ = policy(contexts)
    # 24 requests over 2 replicas at a target of 4 each: Serve's rule wants 6
    assert decisions[IDS["ingress"]] == 6


def test_a_side_without_reported_latency_is_observed_without_it() -> None:
    observation = observe("decode", context("decode", 3, 90))
    assert (observation.latency_s, observation.samples, observation.ongoing_requests) == (
        None,
        0,
        90,
    )


def test_the_highest_replica_latency_is_the_sides() -> None:
    ctx = context("prefill", 2, 8, latency=0.4)
    slow = ctx.running_replicas[1]
    ctx.aggregated_metrics[LATENCY_METRIC["prefill"]][slow] = 0.9
    assert observe("prefill", ctx).latency_s == 0.9
    assert observe("prefill", ctx).samples == 100


def test_the_controllers_clock_and_the_sides_look_back_are_observed() -> None:
    """The hold on missing samples is timed by Serve's clock (AutoscalingContext.current_time)
    in look-back periods of the side's own AutoscalingConfig (30 s here, Ray's default)."""
    observation = observe("decode", context("decode", 3, 90, now=1234.5))
    assert (observation.now_s, observation.look_back_s) == (1234.5, 30.0)


# Each replica's engine requests (Serve's look-back average) and the time of its newest raw
# point (None: the context carries no raw points for it), at 2 running replicas, the controller
# at t = 100 s with a 30 s look-back -> the side's engine requests, the replicas counted and the
# running replicas that have reported at all (a replica without a report has just started).
ENGINE_ROWS = [
    ("none reported: absent", [], None, 0, 0),
    ("all fresh: their sum", [(60.0, 95.0), (70.0, 99.0)], 130.0, 2, 2),
    ("one a look-back older than the other: left out", [(60.0, 95.0), (70.0, 64.0)], 60.0, 1, 2),
    # the controller's clock does not judge: reports reach it a push and a loop late
    ("all late together: kept", [(60.0, 50.0), (70.0, 40.0)], 130.0, 2, 2),
    ("no raw points: the average kept", [(60.0, None)], 60.0, 1, 1),
    ("one not reported yet: the other alone", [(29.0, 99.0)], 29.0, 1, 1),
    ("zero: idle engines, reported", [(0.0, 99.0), (0.0, 99.0)], 0.0, 2, 2),
]


@pytest.mark.parametrize(
    ("why", "reports", "want_requests", "want_replicas", "want_reporting"), ENGINE_ROWS
)
def test_the_engines_requests_are_summed_over_fresh_reports(
    why: str,
    reports: list[tuple[float, float | None]],
    want_requests: float | None,
    want_replicas: int,
    want_reporting: int,
) -> None:
    observation = observe("decode", context("decode", 2, 4, now=100.0, engine=reports))
    assert (
        observation.engine_requests,
        observation.engine_replicas,
        observation.reporting_replicas,
    ) == (want_requests, want_replicas, want_reporting), why
    assert observation.ongoing_requests == 4


def test_a_report_of_a_replica_no_longer_running_is_not_counted_as_reporting() -> None:
    """Serve keeps a stopping replica's last points a while; it is not one of the running."""
    ctx = context("decode", 2, 4, now=100.0, engine=[(60.0, 99.0), (70.0, 99.0)])
    ctx.running_replicas = ctx.running_replicas[:1]
    ctx.current_num_replicas = 1
    assert observe("decode", ctx).reporting_replicas == 1


def test_a_loaded_side_without_samples_is_held_through_serves_wrapper_then_queued() -> None:
    """Serve's own wrapper (Ray 2.58) around the policy: decode with 90 requests in flight and no
    latency is held at its 1 replica for two look-backs (the queue rule would want 3), then
    sized on its queue."""
    policy = _apply_app_level_autoscaling_config(LatencyObjectivePolicy(**KWARGS))
    wanted = {}
    states: dict[Any, dict] = {}
    for now in (0.0, 59.0, 60.0):
        contexts = {
            IDS["prefill"]: context("prefill", 1, 2, latency=0.3, now=now),
            IDS["decode"]: context("decode", 1, 90, now=now, upscale_delay_s=0,
                                   state=states.get(IDS["decode"])),
        }  # fmt: skip
        decisions, states = policy(contexts)
        wanted[now] = decisions[IDS["decode"]]
    assert wanted == {0.0: 1, 59.0: 1, 60.0: 3}


@pytest.mark.parametrize(
    ("decisions", "logged_at"),
    [
        # (now_s, replicas, reason) per decision; look-back 30 s
        ([(0.0, 1, "within_objective"), (1.0, 1, "within_objective")], [0.0]),
        ([(0.0, 1, "within_objective"), (29.9, 1, "within_objective")], [0.0]),
        ([(0.0, 1, "within_objective"), (30.0, 1, "within_objective")], [0.0, 30.0]),
        ([(0.0, 1, "within_objective"), (1.0, 2, "load_rising")], [0.0, 1.0]),
        ([(0.0, 1, "within_objective"), (1.0, 1, "over_objective")], [0.0, 1.0]),
        (
            [(0.0, 1, "within_objective"), (20.0, 2, "load_rising"), (40.0, 2, "load_rising")],
            [0.0, 20.0],
        ),
    ],
)
def test_the_policy_logs_each_change_and_once_a_look_back_while_it_stays(
    caplog: pytest.LogCaptureFixture,
    decisions: list[tuple[float, int, str]],
    logged_at: list[float],
) -> None:
    """The periodic line shows why a side did not move (latency_autoscaler._log_changes)."""
    policy = LatencyObjectivePolicy(objectives={}, limits={})
    with policy_lines(caplog):
        for now_s, replicas, reason in decisions:
            seen = SideObservation(1, 1, 3.0, 0.01, 9, now_s=now_s, look_back_s=30.0)
            policy._log_changes({"decode": seen}, {"decode": Decision(replicas, reason)})
    logged = [
        float(record.getMessage().split("now_s=")[1].split(",")[0]) for record in caplog.records
    ]
    assert logged == logged_at


def test_the_logged_line_carries_the_sides_floor(caplog: pytest.LogCaptureFixture) -> None:
    policy = LatencyObjectivePolicy(objectives={}, limits={})
    policy._memory.floor_s["decode"], policy._memory.floor_load["decode"] = 0.0115, 4.25
    with policy_lines(caplog):
        policy._log_changes(
            {"decode": SideObservation(1, 1, 3.0)}, {"decode": Decision(1, "within_objective")}
        )
    assert caplog.records[0].getMessage().endswith(", floor 0.0115 s at 4.25 per group")
