"""What a benchmark record says about the run itself: the machine's GPU, the engine packages'
versions, and the figures kept from one `vllm bench serve` result file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tools.gpu_bench.workload import FIGURES


def point_figures(raw: Path) -> dict[str, Any]:
    """The figures kept from one point's `vllm bench serve --save-result` file."""
    if not raw.exists():
        return {"missing": "no result file (see bench.log)"}
    saved = json.loads(raw.read_text())
    figures: dict[str, Any] = {key: saved.get(key) for key in FIGURES}
    errors = [error for error in saved.get("errors", []) if error]
    if errors:
        figures["first_error"] = str(errors[0])[:300]
    return figures


def versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for package in ("vllm", "ray", "nixl-cu13", "torch"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "missing"
    return found


def gpu_name() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")[0]
    except (OSError, subprocess.CalledProcessError):
        return "no GPU"
