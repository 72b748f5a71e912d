"""Runs checkov (its own venv, see requirements-checkov.txt) and summarises its JSON report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.configurations import PROJECT_ROOT
from tests.scan_cache import files_under, scan_each, scan_once, with_files

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


def _version(executable: str) -> str:
    """The distributions of checkov's venv (checkov and what it loads), or its path."""
    venv = Path(executable).resolve().parent.parent
    found = sorted(p.name for p in venv.glob("lib/python*/site-packages/*.dist-info"))
    return "\n".join(found) or executable


def run_checkov(directory: Path, framework: str) -> CheckovResult:
    """One checkov run over the directory (a clean result kept while the directory's files,
    this module and checkov's venv are the same: tests/scan_cache.py)."""
    executable = _executable()
    command = [
        executable,
        "--directory",
        str(directory),
        "--framework",
        framework,
        "--skip-download",
        "--quiet",
        "--compact",
        "--output",
        "json",
    ]

    def run() -> dict[str, Any]:
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
        reports = json.loads(result.stdout or "[]")
        reports = reports if isinstance(reports, list) else [reports]
        return {
            "failed": [
                (check["check_id"], check.get("file_path", ""), check["resource"])
                for report in reports
                for check in report.get("results", {}).get("failed_checks", [])
            ],
            "passed": sum(report.get("summary", {}).get("passed", 0) for report in reports),
            "skipped": sum(report.get("summary", {}).get("skipped", 0) for report in reports),
            "stderr": result.stderr[-2000:],
        }

    files = [*files_under(directory), ("tests/checkov.py", Path(__file__))]
    found = scan_once(
        f"checkov-{framework}",
        _version(executable),
        files,
        run,
        clean=lambda result: not result["failed"] and result["passed"] > 0,
    )
    return CheckovResult(
        failed=[tuple(each) for each in found["failed"]],
        passed=found["passed"],
        skipped=found["skipped"],
        stderr=found["stderr"],
    )


def run_checkov_each(files: list[tuple[str, Path]], framework: str) -> dict[str, CheckovResult]:
    """checkov over the files, each file's result on its own (its rules read one file): the
    files without a kept clean result are scanned, in one run (tests/scan_cache.py)."""
    executable = _executable()

    def run(todo: list[tuple[str, Path]]) -> dict[str, dict[str, Any]]:
        with tempfile.TemporaryDirectory() as scratch:
            for name, path in todo:
                shutil.copyfile(path, Path(scratch) / name)
            result = subprocess.run(
                [executable, "--directory", scratch, "--framework", framework, "--skip-download",
                 "--compact", "--output", "json"],
                capture_output=True, text=True, check=False, timeout=600,
            )  # fmt: skip
        reports = json.loads(result.stdout or "[]")
        reports = reports if isinstance(reports, list) else [reports]
        by_file = {name: {"failed": [], "passed": 0, "stderr": ""} for name, _ in todo}
        for report in reports:
            results = report.get("results", {})
            for check in results.get("failed_checks", []):
                each = by_file[Path(check["file_path"]).name]
                each["failed"].append((check["check_id"], check["file_path"], check["resource"]))
                each["stderr"] = result.stderr[-2000:]
            for check in results.get("passed_checks", []):
                by_file[Path(check["file_path"]).name]["passed"] += 1
        return by_file

    found = scan_each(
        f"checkov-{framework}-each",
        with_files(_version(executable), [("tests/checkov.py", Path(__file__))]),
        files,
        run,
        clean=lambda result: not result["failed"] and result["passed"] > 0,
    )
    return {
        name: CheckovResult(
            failed=[tuple(each) for each in result["failed"]],
            passed=result["passed"],
            skipped=0,
            stderr=result["stderr"],
        )
        for name, result in found.items()
    }
