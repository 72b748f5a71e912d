"""The latency policy's decisions as Serve's controller log keeps them, for the local replay's
record (tests/e2e/latency_replay_local.py): each change of a side's wanted replicas or reason,
and a line a look-back period while they stay, with what the policy saw and the side's floor
(serve_extensions/latency_autoscaler.py `_log_changes` prints them).

Until the tenth local run the record kept only Serve's targets, and the controller log stayed in
the run's build folder: when the ninth run's folder was gone, why the lead had not acted at the
turn to long answers (docs/verification.md) could no longer be read. The record now carries the
decisions themselves, each timed from the start of the load in the run's seconds.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# latency_autoscaler._log_changes: "latency policy: %s -> %d replicas (%s), saw %s", the last
# the SideObservation's dataclass repr (field=value, numbers or None).
_LINE = re.compile(
    r"latency policy: (?P<side>\w+) -> (?P<replicas>\d+) replicas \((?P<reason>\w+)\), "
    r"saw SideObservation\((?P<seen>[^)]*)\)"
    r"(?:, floor (?P<floor>\S+) s at (?P<floor_load>\S+) per group)?"
)
_FIELD = re.compile(r"(\w+)=([^,]+)")


def decisions(text: str, load_started_s: float) -> list[dict[str, Any]]:
    """Each logged decision: t_s (the controller's clock, now_s, less the load's start, both
    epoch seconds), side, replicas, reason, every field the policy saw, and the side's floor
    (floor_s, floor_load: None before any latency, or on a line without them)."""
    found = []
    for match in _LINE.finditer(text):
        seen = {name: _value(value) for name, value in _FIELD.findall(match["seen"])}
        now = seen.get("now_s")
        found.append(
            {
                "t_s": None if now is None else round(now - load_started_s, 2),
                "side": match["side"],
                "replicas": int(match["replicas"]),
                "reason": match["reason"],
                "seen": seen,
                "floor_s": _value(match["floor"] or "None"),
                "floor_load": _value(match["floor_load"] or "None"),
            }
        )
    return found


def controller_decisions(logs: Path, load_started_s: float) -> list[dict[str, Any]]:
    """The decisions in every Serve controller log under a run's copied Ray logs (`ray-logs`,
    harness.LocalRay.stop), in the order of their clock."""
    found = []
    for log in sorted(logs.glob("**/serve/controller_*.log")):
        found.extend(decisions(log.read_text(errors="replace"), load_started_s))
    return sorted(found, key=lambda d: (d["t_s"] is None, d["t_s"] or 0.0))


def _value(text: str) -> float | None:
    text = text.strip()
    return None if text == "None" else float(text)
