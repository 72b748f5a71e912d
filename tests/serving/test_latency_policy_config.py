"""serving.scaling.policy = latency in the Serve config: Ray Serve 2.58 (the installed Ray) accepts
the application's autoscaling_policy, imports the policy from serve_extensions and builds it
from the rendered arguments; the queue policy leaves the config as it was."""

from __future__ import annotations

import json

import pytest
from ray.serve._private.autoscaling_state import _resolve_policy_callable
from ray.serve.config import AutoscalingPolicy
from ray.serve.schema import ServeDeploySchema

from app_config.node_labels import GPU_ROLES
from serve_extensions.latency_autoscaler import PERCENTILES_ARG, LatencyObjectivePolicy
from serving_manifests.serve_config import PD_BUILDER, render_serve_config
from serving_manifests.serve_extensions import LATENCY_BUILDER, LATENCY_POLICY, PACKAGE
from tests.configurations import settings_for

LATENCY = {
    "serving.prefill.max_replicas": "2",
    "serving.decode.max_replicas": "2",
    "serving.scaling.policy": "latency",
    "serving.scaling.ttft": json.dumps({"percentile": 95, "value_ms": 800}),
    "serving.scaling.itl": json.dumps({"percentile": 99, "value_ms": 60}),
}


@pytest.mark.parametrize(
    ("configuration", "overrides"),
    [
        ("default", LATENCY),
        ("qwen3-235b-a22b-pd", {k: v for k, v in LATENCY.items() if "max_" not in k}),
    ],
)
def test_ray_serve_builds_the_latency_policy_from_the_rendered_config(
    configuration: str, overrides: dict[str, str]
) -> None:
    settings = settings_for(configuration, **overrides)
    config = render_serve_config(settings)
    (application,) = ServeDeploySchema.model_validate(config).applications
    policy = _resolve_policy_callable(AutoscalingPolicy(**application.autoscaling_policy))
    assert isinstance(policy, LatencyObjectivePolicy)
    assert application.autoscaling_policy["policy_function"] == LATENCY_POLICY


def test_a_dp_sides_bounds_are_in_serve_replicas_and_whole_groups() -> None:
    """Ray Serve LLM multiplies a DP side's min/max_replicas by data_parallel_size (one Serve
    replica per rank): the policy's bounds are those, in groups of that many replicas."""
    settings = settings_for(
        "qwen3-235b-a22b-pd", **{k: v for k, v in LATENCY.items() if "max_" not in k}
    )
    limits = render_serve_config(settings)["applications"][0]["autoscaling_policy"][
        "policy_kwargs"
    ]["limits"]
    for role in GPU_ROLES:
        side, engine = settings.side(role), settings.serving.engine(role)
        assert (limits[role]["min_replicas"], limits[role]["max_replicas"]) == (
            engine.min_replicas * side.data_parallel,
            engine.max_replicas * side.data_parallel,
        )
        assert limits[role]["group_size"] == side.data_parallel
        assert limits[role]["group_gpus"] == side.replica_gpus


def test_the_objectives_and_budget_reach_the_policy() -> None:
    settings = settings_for("default", **LATENCY, **{"serving.scaling.gpu_budget": "24"})
    kwargs = render_serve_config(settings)["applications"][0]["autoscaling_policy"]["policy_kwargs"]
    assert kwargs["objectives"] == {
        "prefill": settings.serving.scaling.ttft.model_dump(),
        "decode": settings.serving.scaling.itl.model_dump(),
    }
    assert kwargs["gpu_budget"] == 24


def test_the_queue_policy_renders_no_application_policy() -> None:
    (application,) = render_serve_config(settings_for("default"))["applications"]
    assert "autoscaling_policy" not in application


def test_the_latency_policy_builds_with_servers_that_report_the_objectives_percentiles() -> None:
    """Ray 2.58's P/D servers report no latency: under the latency policy the app's builder
    (serve_extensions/pd_builder.py) swaps in servers that do, each side at its objective's
    percentile; the queue policy keeps Ray's builder and Ray's arguments only."""
    settings = settings_for("default", **LATENCY)
    (application,) = render_serve_config(settings)["applications"]
    module, function = application["import_path"].split(":")
    assert application["import_path"] == LATENCY_BUILDER
    assert (module, function) == (f"{PACKAGE}.pd_builder", PD_BUILDER.split(":")[1])
    assert application["args"][PERCENTILES_ARG] == {
        "prefill": settings.serving.scaling.ttft.percentile,
        "decode": settings.serving.scaling.itl.percentile,
    }
    (queue,) = render_serve_config(settings_for("default"))["applications"]
    assert queue["import_path"] == PD_BUILDER
    assert PERCENTILES_ARG not in queue["args"]
