"""A gpu-check run's verdicts: PASS/FAIL lines, the JSON file, and the README's table."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdctl.checks import Check


def line(check: Check) -> str:
    """The PASS/FAIL line the run prints for a check."""
    return f"{'PASS' if check.ok else 'FAIL'}  {check.name}" + (
        f": {check.detail}" if check.detail else ""
    )


@dataclass
class Run:
    """What ran, where, with which versions, and each check's verdict."""

    date: str
    gpu: str
    model: str  # the configured model whose architecture was scaled down
    versions: dict[str, str]
    changes: list[str] = field(default_factory=list)  # the deployed config's one-GPU changes
    scale_down: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=dict)  # metric name -> present / absent...

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.ok for check in self.checks)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> Run:
        return cls.from_dict(json.loads(path.read_text()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Run:
        fields = {**data, "checks": [Check(**check) for check in data.get("checks", [])]}
        return cls(**fields)


def markdown_table(runs: Iterable[Run]) -> str:
    """One row per check per run: the README's record of what ran on real engines."""
    rows = [
        "| date | GPU | model (scaled down) | versions | check | result |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        versions = ", ".join(f"{name} {version}" for name, version in run.versions.items())
        for check in run.checks:
            verdict = "PASS" if check.ok else "FAIL"
            detail = f" ({check.detail})" if check.detail else ""
            rows.append(
                f"| {run.date} | {run.gpu} | {run.model} | {versions} | {check.name} | "
                f"{verdict}{detail} |"
            )
    return "\n".join(rows)
