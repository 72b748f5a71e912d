"""Tools we did not write read the synthesized templates: cfn-lint and checkov.

Each runs once over the templates of every configuration (a process start and rule load per
run costs more than the templates themselves); a finding names the configuration it is in.
"""

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


@pytest.fixture(scope="module")
def every_template(
    synthesize: Callable[[str], Synthesized], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """One folder with every configuration's templates, named <configuration>--<stack>."""
    folder = tmp_path_factory.mktemp("every-template")
    for name in CONFIGURATIONS:
        for template in synthesize(name).outdir.glob("*.template.json"):
            (folder / f"{name}--{template.name}").write_text(template.read_text())
    return folder


def test_cfn_lint_finds_nothing_in_any_configuration(every_template: Path) -> None:
    templates = sorted(str(path) for path in every_template.glob("*.template.json"))
    assert len(templates) == 5 * len(CONFIGURATIONS)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "json", *templates],
        cwd=PROJECT_ROOT,  # picks up .cfnlintrc.yaml and its reasons
        capture_output=True,
        text=True,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    named = [(Path(f["Filename"]).name, f["Rule"]["Id"], f["Message"]) for f in findings]
    assert named == [], result.stderr


def test_checkov_has_no_unskipped_failures_in_any_configuration(every_template: Path) -> None:
    result = run_checkov(every_template, "cloudformation")
    assert result.failed == [], result.stderr
    assert result.passed > 0, "checkov evaluated nothing"
