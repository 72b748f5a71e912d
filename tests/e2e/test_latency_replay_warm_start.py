"""The latency-policy replay's warm start keeps its replicas (warm_start.py says how, from Ray
Serve 2.58's code-version rule): the latency sizing deployed as `make latency-replay` deploys it,
at 3 prefill and 1 decode replica, its autoscaling bounds put back, then the replay's first 20 s
of load (`latency_replay_local.py warm-start`, on a local Ray of its own, started at collection
beside the session's tests). A replica that Serve replaced after the second PUT fails here: its
id is gone, or it was STOPPING, while its side's target was still the warm count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import warm_start
from harness import Background, Scenario, Synthesized

SCENARIO = "latency-replay-warm-start"


def background_scenarios(synthesized: Synthesized, out: Path) -> dict[str, Scenario]:
    """Started at collection (conftest.py pytest_collection_finish); it renders its own
    configuration, the replay's latency sizing."""
    result = str(out / f"{SCENARIO}.json")
    return {SCENARIO: Scenario("latency_replay_local.py", ("warm-start", "--out", result))}


@pytest.fixture(scope="module")
def started(background: Background, figures: dict[str, Any]) -> dict[str, Any]:
    result = background.result(SCENARIO)
    figures["latency_replay_warm_start"] = {
        key: result[key] for key in ("warm_start", "requests_sent", "requests_failed")
    }
    return result


def test_both_puts_have_one_code_version_by_serves_own_rule(started: dict[str, Any]) -> None:
    """The start's premise, on Ray's get_app_code_version: the overrides in both PUTs keep the
    version; a first PUT without them (the 2026-12-07 start) changes it."""
    assert started["same_code_version"] is True
    assert started["same_code_version_without_first_overrides"] is False


@pytest.mark.parametrize("side", warm_start.SIDES)
def test_the_warm_replicas_serve_the_load_that_follows_the_release(
    started: dict[str, Any], side: str
) -> None:
    verdict = started["warm_start"][side]
    assert len(verdict["replicas"]) == started["bounds"]["warm"][side]["initial_replicas"]
    # At least 10 s of the load sampled before any scale-down (SAMPLE_S is 0.5 s).
    assert verdict["samples_checked"] >= 20, verdict
    assert verdict["kept"], [s["states"][side] for s in started["samples"][:10]]


def test_no_deployment_lost_a_replica_and_no_request_failed(started: dict[str, Any]) -> None:
    """The ingress too: a code-version change replaces every deployment's replicas."""
    before, after = started["replicas_before_release"], started["replicas_after_load"]
    for name, ids in before.items():
        if name.startswith(tuple(warm_start.SIDE_PREFIX.values())):
            continue  # the sides: above, up to their first scale-down
        assert set(ids) <= set(after[name]), (name, ids, after[name])
    assert started["requests_sent"] > 0
    assert started["requests_failed"] == 0


def test_serve_runs_the_replays_bounds_after_the_release(started: dict[str, Any]) -> None:
    names = {
        side: name
        for name in started["serving_autoscaling"]
        for side, prefix in warm_start.SIDE_PREFIX.items()
        if name.startswith(prefix)
    }
    for side, name in names.items():
        serving = started["serving_autoscaling"][name]
        wanted = started["bounds"]["run"][side]
        assert (serving["min_replicas"], serving["max_replicas"]) == (
            wanted["min_replicas"],
            wanted["max_replicas"],
        ), json.dumps(serving)
    # The release widened what the warm start fixed (decode starts at 1 of its 3).
    assert (
        started["bounds"]["run"]["decode"]["max_replicas"]
        > (started["bounds"]["warm"]["decode"]["max_replicas"])
    )
