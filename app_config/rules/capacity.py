"""Where the GPU instances come from, and what that costs at deploy and at update time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.rules import WARNING, Rule, side_finding
from catalog.instances import is_p_class

if TYPE_CHECKING:
    from app_config.model import Settings


def on_demand_p_class(settings: Settings) -> Iterator[Finding]:
    """On-Demand P-class capacity is rarely free: the launch fails with
    InsufficientInstanceCapacity and the gpu-nodes stack rolls back after the node group's
    wait."""
    for side in settings.sides():
        if side.nodes.capacity.type == "on_demand" and is_p_class(side.instance):
            yield side_finding(
                side.role,
                "on-demand-p-class",
                side.nodes_setting,
                f"asks for On-Demand {side.nodes.instance_type}. On-Demand P-class capacity is "
                "rarely available, and the launch then fails with InsufficientInstanceCapacity. "
                "Use a Capacity Block or an On-Demand Capacity Reservation "
                "(examples/capacity-block.yaml), or try the smaller EFA shape first "
                "(examples/trial-g6e.yaml).",
            )


def capacity_block_update(settings: Settings) -> Iterator[Finding]:
    for side in settings.sides():
        if side.nodes.capacity.type == "capacity_block":
            yield side_finding(
                side.role,
                "capacity-block-update",
                side.nodes_setting,
                "is on a Capacity Block. EKS updates such a node group only at desired size 0 "
                "(EKS user guide, 'Create a managed node group with Capacity Blocks for ML'). "
                "Before a deploy whose `cdk diff` changes this node group's Version, "
                "ReleaseVersion or launch template, scale it to zero and back afterwards "
                "(docs/operating.md, 'Capacity Blocks: updating the node group').",
            )


def dp_group_not_co_located(settings: Settings) -> Iterator[Finding]:
    for side in settings.sides():
        capacity, nodes = side.nodes.capacity, side.nodes_per_replica
        if nodes > 1 and capacity.type == "capacity_reservation" and not capacity.placement_group:
            yield side_finding(
                side.role,
                "dp-group-not-co-located",
                f"{side.nodes_setting}.capacity.placement_group",
                f"a DP group spans {nodes} nodes of an On-Demand Capacity Reservation without "
                "capacity.placement_group; its nodes are co-located only if the reservation was "
                "made in a cluster placement group and the nodes launch into it. Name that group "
                f"in {side.nodes_setting}.capacity.placement_group, or use a Capacity Block "
                "(placed in an EC2 UltraCluster).",
            )


_GPU_NODES = frozenset({"gpu_nodes", "serving"})
RULES = (
    Rule("on-demand-p-class", _GPU_NODES, on_demand_p_class, WARNING, True, "gpu-nodes"),
    Rule("capacity-block-update", _GPU_NODES, capacity_block_update, WARNING, True, "gpu-nodes"),
    Rule(
        "dp-group-not-co-located", _GPU_NODES, dp_group_not_co_located, WARNING, True, "gpu-nodes"
    ),
)
