"""Behaviour over time, measured: replicas killed and Serve-config changes applied while clients
poll and stream (traffic.py). The figures go to figures.json for the README's reliability section;
the tests assert only what must hold on any machine: the application is RUNNING again within a
bound, Serve started the replica it had to, and requests succeed afterwards.

Named to run last: its config changes and restarts stay in effect for the session.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from harness import LocalRay, wait_for
from traffic import Load, StatusLog, measure

RECOVERY_BOUND_S = 300.0
SETTLE_S = 3.0  # load kept on after recovery, so the figures include the first seconds back


@pytest.fixture
def load(pd: LocalRay, model: str) -> Iterator[Load]:
    traffic = Load(pd.base_url, model)
    traffic.start()
    try:
        time.sleep(3.0)  # streams in flight and a baseline of served probes
        yield traffic
    finally:
        traffic.stop()


def engine_starts(pd: LocalRay, role: str) -> list[dict[str, Any]]:
    return [r for r in pd.records() if r["event"] == "start" and r["role"] == role]


def disrupt(
    pd: LocalRay, load: Load, action: Callable[[], None], restarts: tuple[str, ...]
) -> dict[str, Any]:
    """Run ``action`` under load; wait until each side in ``restarts`` has started a new engine,
    the application is RUNNING and a request succeeds; the clients' view, measured."""
    before = {role: len(engine_starts(pd, role)) for role in ("prefill", "decode")}
    status = StatusLog(lambda: pd.applications()[pd.app_name]["status"])
    with status.running():
        event = time.monotonic()
        action()
        wait_for(
            lambda: all(len(engine_starts(pd, role)) > before[role] for role in restarts),
            RECOVERY_BOUND_S,
            0.5,
            f"a new engine on {restarts}",
        )
        pd.wait_status(pd.app_name, "RUNNING", RECOVERY_BOUND_S, failures=("DEPLOY_FAILED",))
        time.sleep(SETTLE_S)
        outcomes = load.stop()
    figures = measure(outcomes, event, status.seen)
    figures["engines_restarted"] = {
        role: len(engine_starts(pd, role)) - before[role] for role in ("prefill", "decode")
    }
    last = [o for o in outcomes if o.kind == "probe" and o.start > time.monotonic() - SETTLE_S]
    assert last, "no probe in the last seconds"
    assert all(o.ok for o in last), [o.error for o in last if not o.ok]
    return figures


def kill_replica(pd: LocalRay, role: str) -> Callable[[], None]:
    def action() -> None:
        import ray
        from ray.util.state import list_actors

        prefix = "Prefill:" if role == "prefill" else "Decode:"
        (replica,) = [
            actor
            for actor in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
            if actor.class_name.startswith("ServeReplica:")
            and actor.class_name.split(":", 2)[2].startswith(prefix)
        ]
        ray.kill(ray.get_actor(replica.name, namespace="serve"), no_restart=True)

    return action


@pytest.mark.parametrize("role", ["decode", "prefill"])
def test_a_killed_replica_is_replaced(
    pd: LocalRay, load: Load, role: str, figures: dict[str, Any]
) -> None:
    measured = disrupt(pd, load, kill_replica(pd, role), restarts=(role,))
    figures.setdefault("under_load", {})[f"{role} replica killed"] = measured
    assert measured["engines_restarted"][role] == 1


def change(pd: LocalRay, edit: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    def action() -> None:
        config = copy.deepcopy(pd.config)
        edit(config["applications"][0]["args"])
        pd.put(config)
        pd.config = config

    return action


def test_an_autoscaling_bound_change(pd: LocalRay, load: Load, figures: dict[str, Any]) -> None:
    """`serving.decode.max_replicas`, which the README lists as applied in place. In the
    serveConfigV2 it is inside the application's args, and Serve's code version of an
    application hashes its args (ray/serve/_private/deploy_utils.py, get_app_code_version):
    every replica of the application is replaced."""

    def raise_bound(args: dict[str, Any]) -> None:
        args["decode_config"]["deployment_config"]["autoscaling_config"]["max_replicas"] += 1

    measured = disrupt(pd, load, change(pd, raise_bound), restarts=("prefill", "decode"))
    figures.setdefault("under_load", {})["decode max_replicas raised"] = measured
    assert measured["engines_restarted"] == {"prefill": 1, "decode": 1}


def test_an_engine_change_applied_in_place(
    pd: LocalRay, load: Load, figures: dict[str, Any]
) -> None:
    """What `upgrade_strategy: None` does with an engine change: Serve replaces the engines on
    the running cluster (with NewCluster, KubeRay starts a second cluster instead). A change to
    one side's engine replaces both sides' (the args are the application's code version)."""

    def lower_memory(args: dict[str, Any]) -> None:
        args["decode_config"]["engine_kwargs"]["gpu_memory_utilization"] -= 0.05

    measured = disrupt(pd, load, change(pd, lower_memory), restarts=("prefill", "decode"))
    figures.setdefault("under_load", {})["decode gpu_memory_utilization changed"] = measured
    wanted = pd.config["applications"][0]["args"]["decode_config"]["engine_kwargs"]
    latest = engine_starts(pd, "decode")[-1]["engine_kwargs"]
    assert latest["gpu_memory_utilization"] == wanted["gpu_memory_utilization"]
