"""What a node group update or a NewCluster upgrade costs a side, said at synth."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.rules import WARNING, Rule, side_finding

if TYPE_CHECKING:
    from app_config.model import Settings
    from app_config.side import Side

_UPDATES_DOC = "docs/operating.md, 'What a node group update costs'"


def _floors(settings: Settings) -> Iterator[tuple[Side, int, int]]:
    for side in settings.sides():
        yield side, side.nodes.scaling.min_size, side.nodes_per_replica


def one_group(settings: Settings) -> Iterator[Finding]:
    """A side whose floor is one DP group stops serving while an update replaces any of its
    nodes (Serve restarts a group whole); P/D needs both sides."""
    for side, floor, nodes in _floors(settings):
        if nodes > 1 and floor < 2 * nodes:
            yield side_finding(
                side.role,
                "one-group",
                f"{side.nodes_setting}.scaling.min_size",
                f"the side may run one DP group ({nodes} nodes), and Ray Serve restarts a group "
                "whole when any of its ranks fails: a node group update or drain of any one of "
                "those nodes stops the side (the endpoint answers nothing, P/D needs both "
                "sides) until the whole group has loaded the model again. Use "
                f"min_size >= {2 * nodes} (two groups) to keep the side serving through updates "
                f"({_UPDATES_DOC}).",
                floor,
            )


def one_node(settings: Settings) -> Iterator[Finding]:
    """A side whose floor is one node stops serving while an update replaces it."""
    for side, floor, nodes in _floors(settings):
        if nodes == 1 and floor < 2:
            yield side_finding(
                side.role,
                "one-node",
                f"{side.nodes_setting}.scaling.min_size",
                "the side may run on one node, and a node group update replaces it; the "
                "endpoint then answers nothing (P/D needs both sides) until the new node has "
                "loaded the model. Use min_size >= 2 (and max_size to match) to keep the side "
                f"serving through updates ({_UPDATES_DOC}).",
                floor,
            )


def no_upgrade_room(settings: Settings) -> Iterator[Finding]:
    for role in settings.sides_without_upgrade_room():
        scaling = settings.gpu_nodes.groups()[role].scaling
        yield side_finding(
            role,
            "no-upgrade-room",
            f"gpu_nodes.{role}.scaling.max_size",
            "cannot hold a NewCluster upgrade's second Ray cluster "
            f"({scaling.desired_size} new worker pods beside at least {scaling.min_size} "
            "serving): Serve and image changes will wait for nodes and not switch. Raise "
            "max_size (and reserved_instances), or use serving.upgrade_strategy None.",
            scaling.max_size,
        )


_READS = frozenset({"gpu_nodes", "serving"})
RULES = (
    Rule("one-node", _READS, one_node, WARNING, True, "gpu-nodes"),
    Rule("one-group", _READS, one_group, WARNING, True, "gpu-nodes"),
    Rule("no-upgrade-room", _READS, no_upgrade_room, WARNING, True, "serving"),
)
