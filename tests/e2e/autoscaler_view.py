"""What Ray 2.58's own autoscaler would launch for a pending data-parallel gang of a rendered
RayService. No cluster is needed: Ray's code is called directly, never in the test session
(importing Ray there would start it before the local cluster's environment is set).
dp_scenarios.py calls ``view`` in its process, where Ray is connected; alone:

    python tests/e2e/autoscaler_view.py RAYSERVICE.json OUT.json GPU_MODEL

1. The autoscaler's config, as the KubeRay autoscaler sidecar derives it from the RayCluster
   (ray/autoscaler/_private/kuberay/autoscaling_config.py, _derive_autoscaling_config_from_ray_cr),
   read through autoscaler v2's AutoscalingConfig (v2/instance_manager/config.py).
2. The gang placement group of one DP group, as Serve reserves it: Ray Serve LLM's
   DPPDPrefillServer/DPPDDecodeServer.get_deployment_options gives one rank's bundles and the
   GangSchedulingConfig; Serve's DeploymentScheduler._prepare_gangs_for_deployment repeats the
   rank's bundles gang_size times (serve/_private/deployment_scheduler.py).
3. That placement group as the GCS reports it while pending: one GangResourceRequest with one
   BundleSelector holding a ResourceRequest per bundle, and for PACK no placement constraint
   (src/ray/gcs/gcs_autoscaler_state_manager.cc GetPendingGangResourceRequests and
   GenPlacementConstraintForPlacementGroup, which returns none for PACK and SPREAD).
4. Autoscaler v2's ResourceDemandScheduler.schedule (v2/scheduler.py) on a cluster whose worker
   groups stand at their minimum, every GPU of those nodes held by the running DP groups.

Each case: the side whose next DP group is pending, and Ray's launch requests and infeasible
gangs. ``accelerator-type-<side>`` asks for the same gang with the LLMConfig's accelerator_type
set to the nodes' GPU model (GPU_MODEL), which Ray Serve LLM turns into an
``accelerator_type:<GPU>`` share in every bundle, a resource no worker group advertises (why
serve_config.py leaves accelerator_type out).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

SIDES = ("prefill", "decode")


def autoscaling_config(rayservice: dict[str, Any]) -> Any:
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )
    from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig

    ray_cluster = {
        "metadata": dict(rayservice["metadata"]),
        "spec": rayservice["spec"]["rayClusterConfig"],
    }
    return AutoscalingConfig(
        _derive_autoscaling_config_from_ray_cr(ray_cluster), skip_content_hash=True
    )


def gang(serve_config: dict[str, Any], side: str, accelerator_type: str | None = None) -> dict:
    """One DP group's gang placement group: bundles, strategy, and Serve's replica bounds."""
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import (
        DPPDDecodeServer,
        DPPDPrefillServer,
    )

    args = copy.deepcopy(serve_config["applications"][0]["args"][f"{side}_config"])
    if accelerator_type:
        args["accelerator_type"] = accelerator_type
    server = DPPDPrefillServer if side == "prefill" else DPPDDecodeServer
    options = server.get_deployment_options(LLMConfig.model_validate(args))
    config = options["gang_scheduling_config"]
    rank_bundles = options["placement_group_bundles"]
    return {
        "gang_size": config.gang_size,
        "strategy": config.gang_placement_strategy.value,
        "failure_policy": config.runtime_failure_policy.value,
        "rank_bundles": rank_bundles,
        "bundles": [dict(bundle) for _ in range(config.gang_size) for bundle in rank_bundles],
        "autoscaling": {
            key: options["autoscaling_config"].get(key) for key in ("min_replicas", "max_replicas")
        },
    }


def pending_gang_request(bundles: list[dict[str, float]], strategy: str) -> Any:
    from ray.core.generated.autoscaler_pb2 import (
        BundleSelector,
        GangResourceRequest,
        ResourceRequest,
    )

    if strategy != "PACK":
        raise ValueError(f"only PACK is modelled here, got {strategy}")
    requests = [ResourceRequest(resources_bundle=bundle) for bundle in bundles]
    return GangResourceRequest(
        requests=requests,
        bundle_selectors=[BundleSelector(resource_requests=requests)],
        details="gang:PACK|PENDING",
    )


def running_nodes(config: Any, gangs: dict[str, dict]) -> list[Any]:
    """The head and each worker group's minimum of nodes, RAY_RUNNING, their GPUs held by the
    side's running DP groups (each node filled with as many bundles as its GPUs hold)."""
    from ray.autoscaler.v2.schema import AutoscalerInstance
    from ray.core.generated.autoscaler_pb2 import NodeState, NodeStatus
    from ray.core.generated.instance_manager_pb2 import Instance

    instances = []
    head_type = config.get_head_node_type()
    for node_type, node_config in config.get_node_type_configs().items():
        count = 1 if node_type == head_type else node_config.min_worker_nodes
        total = dict(node_config.resources)
        used: dict[str, float] = {}
        if node_type in gangs:
            per_node = int(total.get("GPU", 0))
            for bundle in gangs[node_type]["bundles"][:per_node]:
                for key, value in bundle.items():
                    used[key] = used.get(key, 0) + value
        available = {key: max(0.0, value - used.get(key, 0)) for key, value in total.items()}
        for index in range(count):
            name = f"{node_type}-{index}"
            instances.append(
                AutoscalerInstance(
                    cloud_instance_id=name,
                    im_instance=Instance(
                        instance_id=name,
                        instance_type=node_type,
                        status=Instance.RAY_RUNNING,
                        node_id=name,
                        node_kind=1 if node_type == head_type else 2,  # HEAD, WORKER
                    ),
                    ray_node=NodeState(
                        node_id=name.encode(),
                        ray_node_type_name=node_type,
                        total_resources=total,
                        available_resources=available,
                        status=NodeStatus.RUNNING,
                        idle_duration_ms=0,
                    ),
                )
            )
    return instances


def schedule(config: Any, instances: list[Any], gang_request: Any) -> dict[str, Any]:
    from ray.autoscaler.v2.scheduler import ResourceDemandScheduler, SchedulingRequest

    reply = ResourceDemandScheduler().schedule(
        SchedulingRequest(
            node_type_configs=config.get_node_type_configs(),
            max_num_nodes=config.get_max_num_nodes(),
            gang_resource_requests=[gang_request],
            current_instances=instances,
            idle_timeout_s=config.get_idle_timeout_s(),
            disable_launch_config_check=config.disable_launch_config_check(),
        )
    )
    return {
        "launch": {request.instance_type: request.count for request in reply.to_launch},
        "terminate": [request.instance_type for request in reply.to_terminate],
        "infeasible_gangs": len(reply.infeasible_gang_resource_requests),
    }


def view(rayservice: dict[str, Any], accelerator_type: str) -> dict[str, Any]:
    serve_config = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    config = autoscaling_config(rayservice)
    gangs = {side: gang(serve_config, side) for side in SIDES}
    instances = running_nodes(config, gangs)
    result: dict[str, Any] = {
        "node_types": {
            name: {
                "min": node.min_worker_nodes,
                "max": node.max_worker_nodes,
                "resources": dict(node.resources),
            }
            for name, node in config.get_node_type_configs().items()
        },
        "gangs": gangs,
        "running": sorted(instance.im_instance.instance_id for instance in instances),
        "cases": {},
    }
    for side in SIDES:
        result["cases"][f"next-group-{side}"] = schedule(
            config, instances, pending_gang_request(gangs[side]["bundles"], gangs[side]["strategy"])
        )
        # The other side's nodes idle: the side's own resource keeps the gang off them.
        idle_other_side = running_nodes(config, {side: gangs[side]})
        result["cases"][f"next-group-{side}-other-side-idle"] = schedule(
            config,
            idle_other_side,
            pending_gang_request(gangs[side]["bundles"], gangs[side]["strategy"]),
        )
        typed = gang(serve_config, side, accelerator_type=accelerator_type)
        result["cases"][f"accelerator-type-{side}"] = {
            **schedule(
                config, instances, pending_gang_request(typed["bundles"], typed["strategy"])
            ),
            "bundle": typed["bundles"][0],
        }
    return result


def main(argv: list[str]) -> int:
    import ray

    rayservice_path, out, accelerator_type = Path(argv[0]), Path(argv[1]), argv[2]
    # Ray Serve LLM's get_deployment_options reads the runtime context, which starts Ray: a
    # private one-CPU instance in a private directory, never a cluster already on the machine.
    temp_dir = tempfile.mkdtemp(prefix="pdAS", dir="/tmp")
    os.environ["RAY_TMPDIR"] = temp_dir
    ray.init(address="local", num_cpus=1, include_dashboard=False, _temp_dir=temp_dir)
    try:
        result = view(json.loads(rayservice_path.read_text()), accelerator_type)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
