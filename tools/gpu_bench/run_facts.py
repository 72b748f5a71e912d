"""The figures kept from one `vllm bench serve` result file, how a benchmark's record is kept (a
dated JSON file) and how a run's logs come back from the GPU machine."""

from __future__ import annotations

import dataclasses
import json
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self

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
    reading = raw.with_suffix(".cpu.json")
    if reading.exists():
        figures.update(cpu_figures(json.loads(reading.read_text()), saved))
    return figures


def cpu_figures(reading: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any]:
    """Each process group's CPU over a point (tools/gpu_bench/points.py): in cores over the
    benchmark's duration, and in CPU microseconds per output token. The reading spans the
    point's warm-up requests too (4 of them), so both are a little high at the lowest
    concurrency and exact enough at the high ones, where a ceiling shows."""
    duration, tokens = saved.get("duration") or 0, saved.get("total_output_tokens") or 0
    spent = reading["cpu_s"]
    return {
        "cpu_cores": {part: round(s / duration, 3) for part, s in spent.items()}
        if duration
        else {},
        "cpu_us_per_token": {part: round(s * 1e6 / tokens, 1) for part, s in spent.items()}
        if tokens
        else {},
    }


LOG_LIMIT_BYTES = 20 * 2**20


class JsonRecord:
    """A dataclass kept as one indented JSON file (a run's record under docs/)."""

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> Self:
        return cls(**json.loads(path.read_text()))


def archive(tar_path: Path, state: Path, files: Iterable[Path], folders: Iterable[str]) -> None:
    """The run's logs and saved pages in one tar (what a device call can bring back), files over
    LOG_LIMIT_BYTES left out."""
    with tarfile.open(tar_path, "w:gz") as tar:
        for path in files:
            if path.stat().st_size < LOG_LIMIT_BYTES:
                tar.add(path, arcname=path.name)
        for folder in folders:
            if (state / folder).is_dir():
                tar.add(state / folder, arcname=folder)
