"""Runs checkov (its own venv, see requirements-checkov.txt) and summarises its JSON report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.configurations import PROJECT_ROOT

CHECKOV = Path(os.environ.get("CHECKOV_BIN", PROJECT_ROOT / ".venv-checkov" / "bin" / "checkov"))


@dataclass(frozen=True)
class CheckovResult:
    failed: list[tuple[str, str, str]]  # (check id, file, resource)
    passed: int
    skipped: int
    stderr: str


def _executable() -> str:
    if CHECKOV.exists():
        return str(CHECKOV)
    if os.environ.get("CI"):
        pytest.fail(f"checkov not found at {CHECKOV}; `make test` installs it")
    found = shutil.which("checkov")
    if not found:
        pytest.skip("checkov is not installed; `make test` installs it into .venv-checkov")
    return found


def run_checkov(directory: Path, framework: str) -> CheckovResult:
    result = subprocess.run(
        [
            _executable(),
            "--directory",
            str(directory),
            "--framework",
            framework,
            "--skip-download",
            "--quiet",
            "--compact",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    reports = json.loads(result.stdout or "[]")
    reports = reports if isinstance(reports, list) else [reports]
    return CheckovResult(
        failed=[
            (check["check_id"], check.get("file_path", ""), check["resource"])
            for report in reports
            for check in report.get("results", {}).get("failed_checks", [])
        ],
        passed=sum(report.get("summary", {}).get("passed", 0) for report in reports),
        skipped=sum(report.get("summary", {}).get("skipped", 0) for report in reports),
        stderr=result.stderr[-2000:],
    )
