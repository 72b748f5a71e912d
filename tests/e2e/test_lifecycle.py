"""Lifecycle promises on a local Ray of their own (lifecycle_scenarios.py, one process and one
Ray cluster per scenario; the session's `pd` cluster is not used). Both scenarios mostly wait (a
stream at 0.5 s per token past Ray's 60 s reconnect default, 45 s for capacity), so they start
when the session has collected these tests and run beside the other modules (conftest.py,
harness.Background):

- scale to zero: prefill at `min_replicas: 0` deploys without a prefill replica, and the first
  request wakes one (Serve's handle queue is autoscaling demand; Ray 2.58's decode pre-warm is
  not, which is why the synthesized config leaves it off);
- a new Ray cluster whose prefill side waits for capacity: decode starts, the application waits
  without failing, and runs once capacity arrives;
- deleting a Ray cluster while it streams: with the synthesized workers' GCS reconnect timeout a
  stream that outlasts Ray's default (60 s) after the head is gone still finishes, within the
  drain timeout; with a short timeout the same stream is cut: the rule the setting answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import Background, Scenario, Synthesized

RAY_DEFAULT_GCS_RECONNECT_S = 60  # Ray 2.58 ray_config_def.h gcs_rpc_server_reconnect_timeout_s


def worker_env(synthesized: Synthesized, name: str) -> str:
    """The decode workers' value (the streams run there)."""
    env = synthesized.ray_container("decode")["env"]
    return next(e["value"] for e in env if e["name"] == name)


# A stream that runs 25 s past Ray's default after the head is gone, at 0.5 s per token.
STREAM_TOKENS = 2 * (RAY_DEFAULT_GCS_RECONNECT_S + 25)
SHORT_RECONNECT_S = 10  # stands for Ray's 60 s in the control run, to keep it short


def background_scenarios(synthesized: Synthesized, out: Path) -> dict[str, Scenario]:
    """Both scenarios, started at collection (conftest.py pytest_collection_finish)."""
    reconnect_s = worker_env(synthesized, "RAY_gcs_rpc_server_reconnect_timeout_s")
    script = "lifecycle_scenarios.py"
    return {
        "zero-then-head-loss": Scenario(
            script,
            (
                *("zero-then-head-loss", str(out / "zero-then-head-loss.json")),
                *("--reconnect-s", reconnect_s, "--tokens", str(STREAM_TOKENS)),
            ),
        ),
        "capacity-then-head-loss": Scenario(
            script,
            (
                *("capacity-then-head-loss", str(out / "capacity-then-head-loss.json")),
                *("--reconnect-s", str(SHORT_RECONNECT_S), "--tokens", str(STREAM_TOKENS)),
                *("--wait-s", "45"),
            ),
        ),
    }


@pytest.fixture(scope="module")
def with_synthesized_reconnect(background: Background, figures: dict[str, Any]) -> dict[str, Any]:
    result = background.result("zero-then-head-loss")
    figures["lifecycle_prefill_at_zero_then_head_loss"] = result
    return result


@pytest.fixture(scope="module")
def with_short_reconnect(background: Background, figures: dict[str, Any]) -> dict[str, Any]:
    result = background.result("capacity-then-head-loss")
    figures["lifecycle_capacity_wait_then_head_loss_short_reconnect"] = result
    return result


def test_prefill_at_zero_deploys_and_wakes_on_the_first_request(with_synthesized_reconnect):
    result = with_synthesized_reconnect
    assert result["prefill_engines_when_running"] == 0
    assert result["decode_engines_when_running"] >= 1
    assert result["first_request"]["error"] is None
    assert result["first_request"]["tokens"] > 0
    assert result["prefill_engines_after"] == 1


def test_a_stream_outlives_the_deleted_head_within_the_drain_timeout(
    with_synthesized_reconnect, synthesized: Synthesized
) -> None:
    drain_s = int(worker_env(synthesized, "LLM_SERVING_DRAIN_SECONDS"))
    result = with_synthesized_reconnect["head_loss"]
    assert result["head_killed"]
    assert result["error"] is None, result
    assert (result["tokens"], result["finish"]) == (STREAM_TOKENS, "length")
    assert RAY_DEFAULT_GCS_RECONNECT_S < result["streamed_after_head_killed_s"] < drain_s


def test_a_new_cluster_waiting_for_prefill_capacity_runs_once_it_arrives(with_short_reconnect):
    result = with_short_reconnect
    app_statuses = {app for app, _, _ in result["seen_while_waiting"]}
    assert app_statuses <= {"DEPLOYING", None}  # never DEPLOY_FAILED, never RUNNING early
    assert result["decode_engines_while_waiting"] >= 1  # decode did not wait for prefill
    assert result["first_request"]["error"] is None
    assert result["first_request"]["tokens"] > 0


def test_with_a_short_reconnect_timeout_the_stream_is_cut_when_the_raylet_gives_up(
    with_short_reconnect,
) -> None:
    """The rule the setting answers, scaled down: the worker raylet exits once the GCS has
    been gone for its reconnect timeout, and the stream with it."""
    result = with_short_reconnect["head_loss"]
    assert result["head_killed"]
    assert result["tokens"] < STREAM_TOKENS
    assert result["streamed_after_head_killed_s"] < SHORT_RECONNECT_S + 15
