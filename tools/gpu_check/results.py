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
    model: str  # the configured model: the name the engines serve
    architecture: str  # config.json's architecture class, scaled down (its source file)
    versions: dict[str, str]
    changes: list[str] = field(default_factory=list)  # the deployed config's one-GPU changes
    scale_down: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=dict)  # metric name -> present / absent...
    deployment: str = ""  # the configuration file synthesized (`-c config=`), "" for cdk.json's

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


def markdown_report(runs: Iterable[Run]) -> str:
    """The docs' record of what ran on real engines: per run, where and with what, then one row
    per check (generated from the result files, so the page cannot drift from them)."""
    parts = []
    for run in runs:
        versions = ", ".join(f"{name} {version}" for name, version in run.versions.items())
        source = f" from `{run.deployment}`" if run.deployment else ""
        rows = [
            f"**{run.date}, {run.gpu}: {run.architecture}**, served as `{run.model}`{source} "
            f"({versions})",
            "",
            "| check | result |",
            "|---|---|",
        ]
        for check in run.checks:
            verdict = "PASS" if check.ok else "FAIL"
            rows.append(
                f"| {check.name} | {verdict}" + (f": {check.detail}" if check.detail else "") + " |"
            )
        parts.append("\n".join(rows))
    return "\n\n".join(parts)
