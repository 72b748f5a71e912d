"""Places both sides of a shared node's rendered Serve config on a local Ray node shaped like
the rendered worker pod, and writes what Ray 2.58's scheduler did (tests/e2e/
test_shared_node_placement.py judges it). Its own process and Ray instance, in a private temp
dir, so that no session's Ray is touched:

    python tests/e2e/shared_node_probe.py RAYSERVICE.yaml OUT.json

Each side's placement group is its rendered bundles as Ray Serve LLM 2.58 expands them
(llm/_internal/serve/engines/vllm/vllm_models.py `placement_bundles`: bundle_per_worker once per
engine worker, TP x PP times), with one actor per bundle standing for an engine worker.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

SIDES = ("prefill", "decode")
WAIT_SECONDS = 5  # how long a placement group that should not fit is given


def _bundles(serve: dict[str, Any], side: str) -> tuple[list[dict[str, float]], str]:
    llm = serve["applications"][0]["args"][f"{side}_config"]
    engine, group = llm["engine_kwargs"], llm["placement_group_config"]
    workers = engine["tensor_parallel_size"] * engine["pipeline_parallel_size"]
    bundle = {key: float(value) for key, value in group["bundle_per_worker"].items()}
    return [dict(bundle) for _ in range(workers)], group["strategy"]


def probe(service: dict[str, Any]) -> dict[str, Any]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(num_cpus=0)
    class EngineWorker:
        def gpu_ids(self) -> list[str]:
            return [str(gpu) for gpu in ray.get_gpu_ids()]

    def place(bundles: list[dict[str, float]], strategy: str) -> list[str]:
        group = placement_group(bundles, strategy=strategy)
        ray.get(group.ready(), timeout=60)
        actors = [
            EngineWorker.options(
                num_gpus=bundle["GPU"],
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=index
                ),
            ).remote()
            for index, bundle in enumerate(bundles)
        ]
        return [gpu for actor in actors for gpu in ray.get(actor.gpu_ids.remote())]

    def fits(bundles: list[dict[str, float]], strategy: str) -> bool:
        group = placement_group(bundles, strategy=strategy)
        ready, _ = ray.wait([group.ready()], timeout=WAIT_SECONDS)
        remove_placement_group(group)
        return bool(ready)

    serve = yaml.safe_load(service["spec"]["serveConfigV2"])
    (worker,) = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    gpus = int(limits["nvidia.com/gpu"])
    resources = {key: float(value) for key, value in worker["resources"].items()}
    temp_dir = tempfile.mkdtemp(prefix="pdSN", dir="/tmp")
    os.environ["RAY_TMPDIR"] = temp_dir
    ray.init(
        address="local", num_cpus=8, num_gpus=gpus, resources=resources,
        include_dashboard=False, _temp_dir=temp_dir,
    )  # fmt: skip
    try:
        prefill = place(*_bundles(serve, "prefill"))
        # With prefill placed, half the GPUs are free: may a second prefill replica take them?
        second_prefill_fits = fits(*_bundles(serve, "prefill"))
        decode = place(*_bundles(serve, "decode"))
        return {
            "pod_gpus": gpus,
            "resources": resources,
            "gpu_ids": {"prefill": prefill, "decode": decode},
            "second_prefill_fits_beside_prefill": second_prefill_fits,
        }
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    service = yaml.safe_load(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(probe(service), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
