"""cfn-lint, a tool we did not write, reads every configuration's templates in one run; a finding
names the configurations it is in (<configuration>--<stack>.template.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.configurations import CONFIGURATIONS, PROJECT_ROOT
from tests.stacks.conftest import EveryTemplate


def test_cfn_lint_finds_nothing_in_any_configuration(every_template: EveryTemplate) -> None:
    templates = sorted(str(path) for path in every_template.folder.glob("*.template.json"))
    covered = [name for each in templates for name in every_template.named(each)]
    assert len(covered) == len(set(covered)) == 5 * len(CONFIGURATIONS)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "json", *templates],
        cwd=PROJECT_ROOT,  # picks up .cfnlintrc.yaml and its reasons
        capture_output=True,
        text=True,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    named = [(every_template.named(f["Filename"]), f["Rule"]["Id"], f["Message"]) for f in findings]
    assert named == [], result.stderr
