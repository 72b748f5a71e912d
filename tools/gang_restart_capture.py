"""Captures what a Ray node's metrics port shows while Ray Serve restarts a gang: the data in
tests/data/gang_restart/ (see its README), which tests/behaviour/test_dp_group_alert_behaviour.py
replays through the DPGroupRestarting rule.

A Serve deployment of two gangs of two replicas (RESTART_GANG, as Ray Serve LLM's DPServer
configures a DP group), named like a decode side; one replica exits; the script scrapes the
node's metrics port before, during and after the restart and keeps the Serve families the rule
reads. Run it with the e2e venv's Python against a local Ray started with default metrics
intervals, for example:

    ray start --head --port=26379 --num-cpus=4 --metrics-export-port=29080 --include-dashboard=false
    RAY_ADDRESS=127.0.0.1:26379 python tools/gang_restart_capture.py 29080 tests/data/gang_restart
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from pathlib import Path

import ray
from ray import serve
from ray.serve.config import GangRuntimeFailurePolicy, GangSchedulingConfig

FAMILIES = (
    "ray_serve_autoscaling_target_replicas",
    "ray_serve_deployment_replica_healthy",
    "ray_serve_deployment_replica_starts",
    "ray_serve_health_check_failures",
)
# (phase, scrapes, seconds between them)
PHASES = (("steady", 6, 10), ("after the exit", 12, 5), ("recovered", 4, 10))


@serve.deployment(
    num_replicas=4,
    gang_scheduling_config=GangSchedulingConfig(
        gang_size=2, runtime_failure_policy=GangRuntimeFailurePolicy.RESTART_GANG
    ),
    ray_actor_options={"num_cpus": 0.1},
    health_check_period_s=1,
    health_check_timeout_s=2,
)
class Rank:
    def __call__(self) -> str:
        return serve.get_replica_context().replica_id.unique_id

    def exit(self) -> None:
        os._exit(1)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    kept = [line for line in text.splitlines() if any(family in line for family in FAMILIES)]
    return "".join(f"{line}\n" for line in kept)


def main(port: int, out: Path) -> None:
    ray.init()
    handle = serve.run(Rank.options(name="Decode:fake").bind(), name="pd-llm", route_prefix=None)
    time.sleep(15)
    count = 0
    for phase, scrapes, every in PHASES:
        if phase == "after the exit":
            try:
                handle.exit.remote().result(timeout_s=10)
            except Exception as error:  # the replica died answering: what was wanted
                print(f"exit: {type(error).__name__}")
        for _ in range(scrapes):
            time.sleep(every)
            (out / f"scrape-{count:02d}.txt").write_text(scrape(port))
            count += 1


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
