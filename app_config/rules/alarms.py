"""Alarm timing against the Cluster Autoscaler's own waits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app_config.errors import Problem
from app_config.rules import Rule

if TYPE_CHECKING:
    from app_config.model import Settings


def alarm_timing_problems(settings: Settings) -> list[Problem]:
    """Alarms about missing nodes wait at least as long as the Cluster Autoscaler waits for a
    node it asked for: earlier, they page while a normal scale-up is still under way."""
    provision = settings.cluster.node_autoscaler.max_node_provision_minutes
    alarms = settings.observability.alarms
    return [
        Problem(
            f"observability.alarms.{name}",
            f"{minutes} minutes is shorter than cluster.node_autoscaler."
            f"max_node_provision_minutes ({provision}), how long the Cluster Autoscaler waits "
            "for a node it asked for: the alarm would page during a normal scale-up; use at "
            f"least {provision}",
            minutes,
        )
        for name, minutes in (
            ("node_shortfall_minutes", alarms.node_shortfall_minutes),
            ("capacity_shortfall_minutes", alarms.capacity_shortfall_minutes),
        )
        if minutes < provision
    ]


RULES = (Rule("alarm-timing", frozenset({"cluster", "observability"}), alarm_timing_problems),)
