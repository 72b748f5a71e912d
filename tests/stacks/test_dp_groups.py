"""A side whose DP group spans nodes, as synthesized from the MoE examples: the worker pods talk
NCCL over EFA, the Ray worker group and the disruption budgets count whole groups, and the synth
says what a one-group floor or an unplaced reservation costs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app_config.node_labels import GPU_ROLES, ROLE_LABEL
from catalog.expert_parallel import NCCL_ON_EFA_ENV
from serving_manifests.names import RAYSERVICE_LABEL
from tests.configurations import render_deployed
from tests.conftest import Synthesized

MOE_EXAMPLES = ["deepseek-v3-pd", "qwen3-235b-a22b-pd"]


def _warnings(synthesized: Synthesized) -> str:
    return "\n".join(synthesized.gpu_node_warnings())


@pytest.mark.parametrize("example", MOE_EXAMPLES)
def test_workers_of_a_side_spanning_nodes_get_the_nccl_over_efa_environment(
    synthesize: Callable[[str], Synthesized], example: str
) -> None:
    settings = synthesize(example).settings
    groups = {
        group["groupName"]: group
        for group in render_deployed(settings).rayservice["spec"]["rayClusterConfig"][
            "workerGroupSpecs"
        ]
    }
    for role in GPU_ROLES:
        (container,) = groups[role]["template"]["spec"]["containers"]
        env = {item["name"]: item.get("value") for item in container["env"]}
        spans = settings.nodes_per_replica(role) > 1
        for name, value in NCCL_ON_EFA_ENV.items():
            assert (env.get(name) == value) if spans else (name not in env or env[name] == value)


@pytest.mark.parametrize("example", MOE_EXAMPLES)
def test_the_worker_group_holds_whole_groups(
    synthesize: Callable[[str], Synthesized], example: str
) -> None:
    settings = synthesize(example).settings
    for group in render_deployed(settings).rayservice["spec"]["rayClusterConfig"][
        "workerGroupSpecs"
    ]:
        nodes = settings.nodes_per_replica(group["groupName"])
        for count in ("replicas", "minReplicas", "maxReplicas"):
            assert group[count] % nodes == 0


@pytest.mark.parametrize("example", MOE_EXAMPLES)
def test_a_floor_of_one_group_gets_a_warning_and_no_budget(
    synthesize: Callable[[str], Synthesized], example: str
) -> None:
    synthesized = synthesize(example)
    settings = synthesized.settings
    warnings = _warnings(synthesized)
    budgets = {
        b["spec"]["selector"]["matchLabels"][ROLE_LABEL]
        for b in render_deployed(settings).pod_disruption_budgets
        if b["spec"]["selector"]["matchLabels"][RAYSERVICE_LABEL] == settings.serving.name
    }
    said = warnings + "\n".join(synthesized.infos())  # warned, or acknowledged with a reason
    for role, group in settings.gpu_nodes.groups().items():
        nodes = settings.side(role).nodes_per_replica
        one_group = nodes > 1 and group.scaling.min_size < 2 * nodes
        assert (f"pd-llm:one-group-{role}" in said) == one_group
        if one_group:
            assert role not in budgets


def test_a_dp_group_on_a_reservation_outside_a_placement_group_warns(
    synthesize: Callable[..., Synthesized],
) -> None:
    """The Qwen example names the decode reservation's placement group; without it, the synth
    says the group's two nodes may not be co-located."""
    assert "co-located only if" not in _warnings(synthesize("qwen3-235b-a22b-pd"))
    capacity = '{"type": "capacity_reservation", "reservation_id": "cr-0fedcba9876543210", '
    capacity += '"reserved_instances": 4}'
    unplaced = synthesize("qwen3-235b-a22b-pd", {"gpu_nodes.decode.capacity": capacity})
    assert "gpu_nodes.decode.capacity.placement_group: a DP group spans 2 nodes" in _warnings(
        unplaced
    )
