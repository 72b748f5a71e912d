"""A warm start that Ray Serve 2.58 keeps: deploy each side at a fixed count, then give it the
run's autoscaling bounds without Serve replacing a replica (the latency-policy replay,
latency_replay_local.py; its check, test_latency_replay_warm_start.py).

Why two PUTs: while a deployment has no running replica Ray 2.58 lets the policy skip the
downscale delay (autoscaling_policy.py _apply_default_params, _get_cold_start_scale_up_replicas:
`current_num_replicas == 0`), so a deployment whose initial_replicas are still starting is cut
to its minimum at once. The warm count is held by min = max while the replicas start, and the
run's bounds are put back when they serve.

Why both PUTs carry the same `deployments` overrides: Serve keeps a replica only while its
deployment's code version holds (_private/version.py DeploymentVersion.requires_actor_restart),
and the code version is a hash of the import path, runtime_env, args, the application's
autoscaling policy and the list of `deployments[].autoscaling_config.policy`, one entry per
override that has an autoscaling_config (_private/deploy_utils.py get_app_code_version). A first
PUT without overrides and a second with them hash differently: Serve rebuilds the application
and replaces every replica of every deployment (the 2026-12-07 replay). With an override per side
in both, only the overrides' values differ: `apply_app_config` takes the lightweight path
(override_deployment_info), and an autoscaling_config enters the deployment's version only by its
metrics_interval_s and look_back_period_s (version.py _get_serialized_options), which the two
PUTs share, so the replicas stay and Serve only re-registers the bounds
(autoscaling_state.py DeploymentAutoscalingState.register: the target becomes initial_replicas).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from harness import LocalRay, wait_for

SIDES = ("prefill", "decode")
# Ray Serve LLM names a side "<Prefill|Decode>:" + its model id with "/" as "--" and "." as "_"
# (serving_patterns/prefill_decode/builder.py name_prefix; core/server/builder.py
# _get_deployment_name, Ray 2.58). A wrong name fails the first PUT: Serve refuses an override
# of a deployment the application does not have (application_state.py override_deployment_info).
SIDE_PREFIX = {"prefill": "Prefill:", "decode": "Decode:"}


def deployment_names(application: dict[str, Any]) -> dict[str, str]:
    """Each side's Serve deployment name, from its LLMConfig's model id."""
    names = {}
    for side in SIDES:
        model_id = application["args"][f"{side}_config"]["model_loading_config"]["model_id"]
        names[side] = SIDE_PREFIX[side] + model_id.replace("/", "--").replace(".", "_")
    return names


def with_bounds(config: dict[str, Any], bounds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The Serve config with each side's autoscaling_config as a deployment override (the
    first application's), in the same order every time; the input is left alone."""
    config = copy.deepcopy(config)
    application = config["applications"][0]
    names = deployment_names(application)
    application["deployments"] = [
        {"name": names[side], "autoscaling_config": bounds[side]} for side in SIDES
    ]
    return config


def deploy_warm(cluster: LocalRay, warm: dict[str, dict[str, Any]], timeout: float) -> None:
    """The first PUT: each side fixed at its warm count, RUNNING when this returns."""
    cluster.deploy(with_bounds(cluster.config, warm), timeout=timeout)


def release(cluster: LocalRay, bounds: dict[str, dict[str, Any]]) -> None:
    """The second PUT: the run's bounds, the same overrides otherwise; returns once Serve
    reports them."""
    cluster.put(with_bounds(cluster.config, bounds))
    names = deployment_names(cluster.config["applications"][0])

    def applied() -> bool:
        now = cluster.applications()[cluster.app_name]["deployments"]
        for side, name in names.items():
            serving = now[name]["deployment_config"]["autoscaling_config"]
            if any(serving[k] != bounds[side][k] for k in ("min_replicas", "max_replicas")):
                return False
        return True

    wait_for(applied, 60, 0.5, "autoscaling bounds applied")


def replicas(cluster: LocalRay) -> dict[str, dict[str, str]]:
    """Every deployment's replicas of the application, id -> state, as Serve reports them."""
    deployments = cluster.applications()[cluster.app_name]["deployments"]
    return {
        name: {r["replica_id"]: r["state"] for r in deployment.get("replicas") or []}
        for name, deployment in deployments.items()
    }


def code_versions_match(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether Serve 2.58 gives the two configs' first application the same code version (its
    own rule, deploy_utils.get_app_code_version): the replicas stay only if it does."""
    from ray.serve._private.deploy_utils import get_app_code_version
    from ray.serve.schema import ServeApplicationSchema

    def version(config: dict[str, Any]) -> str:
        application = json.loads(json.dumps(config["applications"][0]))
        return get_app_code_version(ServeApplicationSchema(**application))

    return version(first) == version(second)


def kept(before: dict[str, dict[str, str]], samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per side, whether every replica it had before the release was there and RUNNING in each
    sample (t, targets and states per side, in order) until its target first fell below the
    warm count (a policy's scale-down may then remove one: not a replacement)."""
    verdicts = {}
    for side in SIDES:
        (warm,) = [ids for name, ids in before.items() if name.startswith(SIDE_PREFIX[side])]
        checked, held = 0, True
        for sample in samples:
            if sample["targets"][side] < len(warm):
                break
            checked += 1
            held = held and all(sample["states"][side].get(i) == "RUNNING" for i in warm)
        verdicts[side] = {"replicas": sorted(warm), "samples_checked": checked, "kept": held}
    return verdicts
