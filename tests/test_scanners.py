"""Tools we did not write read the synthesized templates: cfn-lint and checkov."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.configurations import CONFIGURATIONS, PROJECT_ROOT
from tests.conftest import Synthesized

CHECKOV = Path(os.environ.get("CHECKOV_BIN", PROJECT_ROOT / ".venv-checkov" / "bin" / "checkov"))


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_cfn_lint_finds_nothing(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    templates = sorted(str(p) for p in synthesize(configuration).outdir.glob("*.template.json"))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "json", *templates],
        cwd=PROJECT_ROOT,  # picks up .cfnlintrc.yaml and its reasons
        capture_output=True,
        text=True,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    assert [(f["Rule"]["Id"], f["Message"]) for f in findings] == [], result.stderr


def checkov_command() -> list[str]:
    return [_checkov()]


def _checkov() -> str:
    if CHECKOV.exists():
        return str(CHECKOV)
    if os.environ.get("CI"):
        pytest.fail(f"checkov not found at {CHECKOV}; `make test` installs it")
    found = shutil.which("checkov")
    if not found:
        pytest.skip("checkov is not installed; `make test` installs it into .venv-checkov")
    return found


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_checkov_has_no_unskipped_failures(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    outdir = synthesize(configuration).outdir
    result = subprocess.run(
        [
            _checkov(),
            "--directory",
            str(outdir),
            "--framework",
            "cloudformation",
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
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [
        (check["check_id"], check["resource"], check["file_path"])
        for report in reports
        for check in report.get("results", {}).get("failed_checks", [])
    ]
    assert failed == [], result.stderr[-2000:]
    passed = sum(report.get("summary", {}).get("passed", 0) for report in reports)
    assert passed > 0, "checkov evaluated nothing"
