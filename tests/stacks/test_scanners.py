"""Tools we did not write read the synthesized templates: cfn-lint and checkov."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.checkov import run_checkov
from tests.configurations import CONFIGURATIONS, PROJECT_ROOT
from tests.conftest import Synthesized


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


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_checkov_has_no_unskipped_failures(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    result = run_checkov(synthesize(configuration).outdir, "cloudformation")
    assert result.failed == [], result.stderr
    assert result.passed > 0, "checkov evaluated nothing"
