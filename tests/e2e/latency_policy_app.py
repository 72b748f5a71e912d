"""A Serve application of two sides named as Ray Serve LLM names them (Prefill:<model>,
Decode:<model>) behind an ingress, whose replicas report fixed latencies as the latency policy's
custom metrics (Serve calls record_autoscaling_stats on every replica, Ray 2.58
_private/replica.py). Run as a script it starts its own local Ray, deploys the application with
serve_extensions' LatencyObjectivePolicy as its application-level autoscaling policy, as
serving_manifests/serve_config.py renders it, and writes the replica counts it reaches as JSON
to OUT.json: tests/e2e/test_latency_policy.py reads them.

    python tests/e2e/latency_policy_app.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ray import serve

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from serve_extensions.latency_autoscaler import LATENCY_METRIC, SAMPLES_METRIC  # noqa: E402
from serving_manifests.serve_extensions import LATENCY_POLICY  # noqa: E402

SIDES = ("prefill", "decode")
OBJECTIVES_MS = {"prefill": 1000.0, "decode": 50.0}
# What each side's replicas report, in seconds: prefill twice its objective, decode a fifth.
REPORTED_S = {"prefill": 2.0, "decode": 0.010}
MAX_REPLICAS = 3


@serve.deployment
class Side:
    def __init__(self, side: str) -> None:
        self._side = side

    def record_autoscaling_stats(self) -> dict[str, float]:
        return {LATENCY_METRIC[self._side]: REPORTED_S[self._side], SAMPLES_METRIC: 50}

    async def __call__(self, *_: Any) -> str:
        return self._side


@serve.deployment(name="Ingress")
class Ingress:
    def __init__(self, prefill: Any, decode: Any) -> None:
        self._handles = (prefill, decode)

    async def __call__(self, *_: Any) -> str:
        return "ok"


def build(_: dict[str, Any]) -> Any:
    return Ingress.bind(
        Side.options(name="Prefill:model").bind("prefill"),
        Side.options(name="Decode:model").bind("decode"),
    )


def config() -> dict[str, Any]:
    autoscaling = {
        "min_replicas": 1,
        "max_replicas": MAX_REPLICAS,
        "target_ongoing_requests": 4,
        "upscale_delay_s": 2,
        "downscale_delay_s": 600,
        "look_back_period_s": 5,
    }
    return {
        "applications": [
            {
                "name": "pd",
                "route_prefix": "/",
                "import_path": "latency_policy_app:build",
                "deployments": [
                    {"name": f"{side.capitalize()}:model", "autoscaling_config": autoscaling}
                    for side in SIDES
                ],
                "autoscaling_policy": {
                    "policy_function": LATENCY_POLICY,
                    "policy_kwargs": {
                        "objectives": {
                            side: {"percentile": 95, "value_ms": OBJECTIVES_MS[side]}
                            for side in SIDES
                        },
                        "limits": {
                            side: {
                                "min_replicas": 1,
                                "max_replicas": MAX_REPLICAS,
                                "group_size": 1,
                                "group_gpus": 1,
                                "target_ongoing_requests": 4,
                            }
                            for side in SIDES
                        },
                        "gpu_budget": None,
                    },
                },
            }
        ]
    }


# The scale-up's bound, counted from the application's RUNNING: deploying it (a Ray of its own
# and five replicas) is not the policy's time. From then each of prefill's two steps is a
# decision on a replica's report (pushed every 10 s) and a replica's start. Counted from the
# deploy, 120 s ran out with both cores busy elsewhere (prefill at 2 of 3, 121 s).
SCALE_UP_BOUND_S = 120.0
DEPLOY_BOUND_S = 300.0


def main(out: Path) -> int:
    import ray
    from ray.serve.schema import ServeDeploySchema

    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join((here, str(ROOT)))
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        _temp_dir=tempfile.mkdtemp(prefix="ray-latency-"),
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:
        serve.start()
        client = serve.context._get_global_client()
        client.deploy_apps(ServeDeploySchema.model_validate(config()))
        deployed = time.monotonic()
        while (status := serve.status().applications.get("pd")) is None or (
            status.status != "RUNNING"
        ):
            if time.monotonic() - deployed > DEPLOY_BOUND_S:
                raise TimeoutError(f"pd not RUNNING after {DEPLOY_BOUND_S:.0f} s: {status}")
            time.sleep(1)
        start, counts = time.monotonic(), {}
        while time.monotonic() - start < SCALE_UP_BOUND_S:
            status = serve.status().applications.get("pd")
            if status is not None:
                counts = {
                    name: sum(d.replica_states.values()) if d.replica_states else 0
                    for name, d in status.deployments.items()
                }
                if counts.get("Prefill:model", 0) >= MAX_REPLICAS:
                    break
            time.sleep(2)
        result = {
            "replicas": counts,
            "max_replicas": MAX_REPLICAS,
            "after_s": round(time.monotonic() - start),
            "deployed_after_s": round(start - deployed),
        }
        out.write_text(json.dumps(result) + "\n")
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
