"""The local replay's record of the latency policy's decisions (tools/latency_policy_log.py) reads
the lines the policy itself prints (serve_extensions/latency_autoscaler.py `_log_changes`),
generated here by that code, not written by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve_extensions.latency_autoscaler import LatencyObjectivePolicy
from serve_extensions.latency_policy import Decision, SideObservation
from tests.policy_lines import policy_lines
from tools.latency_policy_log import controller_decisions, decisions

LOAD_STARTED_S = 1_765_100_000.0


def _printed(
    caplog: pytest.LogCaptureFixture,
    seen: SideObservation,
    decision: Decision,
    floor: tuple[float, float] | None = None,
) -> str:
    policy = LatencyObjectivePolicy(objectives={}, limits={})
    if floor is not None:
        policy._memory.floor_s["decode"], policy._memory.floor_load["decode"] = floor
    with policy_lines(caplog):
        policy._log_changes({"decode": seen}, {"decode": decision})
    return caplog.text


def test_a_printed_decision_is_read_back_with_what_the_policy_saw(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen = SideObservation(
        running_replicas=1,
        target_replicas=1,
        ongoing_requests=44.175,
        latency_s=0.007606137783581625,
        samples=40,
        now_s=LOAD_STARTED_S + 485.6,
        look_back_s=4.0,
        engine_requests=43.75,
        engine_replicas=1,
    )
    printed = _printed(caplog, seen, Decision(2, "load_rising", 0.38), floor=(0.0115, 4.25))
    (found,) = decisions(printed, LOAD_STARTED_S)
    assert found["t_s"] == 485.6
    assert (found["side"], found["replicas"], found["reason"]) == ("decode", 2, "load_rising")
    assert found["seen"]["latency_s"] == pytest.approx(0.007606137783581625)
    assert found["seen"]["engine_requests"] == 43.75
    assert found["seen"]["look_back_s"] == 4.0
    assert (found["floor_s"], found["floor_load"]) == (0.0115, 4.25)


def test_a_side_without_samples_reads_none(caplog: pytest.LogCaptureFixture) -> None:
    seen = SideObservation(running_replicas=1, target_replicas=1, ongoing_requests=0.0,
                           now_s=LOAD_STARTED_S + 1.0)  # fmt: skip
    (found,) = decisions(_printed(caplog, seen, Decision(1, "queue_fallback")), LOAD_STARTED_S)
    assert found["seen"]["latency_s"] is None
    assert found["seen"]["engine_requests"] is None
    assert found["reason"] == "queue_fallback"
    assert (found["floor_s"], found["floor_load"]) == (None, None)


def test_every_controller_log_of_a_run_in_clock_order(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    lines = []
    for at_s, replicas in ((30.0, 2), (10.0, 1)):
        caplog.clear()
        seen = SideObservation(1, 1, 3.0, 0.01, 9, now_s=LOAD_STARTED_S + at_s)
        lines.append(_printed(caplog, seen, Decision(replicas, "within_objective")))
    serve = tmp_path / "ray-logs" / "serve"
    serve.mkdir(parents=True)
    (serve / "controller_1.log").write_text(lines[0])
    (serve / "controller_2.log").write_text(lines[1])
    (serve / "replica_x.log").write_text(lines[0])  # not the controller's: left out
    found = controller_decisions(tmp_path / "ray-logs", LOAD_STARTED_S)
    assert [(d["t_s"], d["replicas"]) for d in found] == [(10.0, 1), (30.0, 2)]
