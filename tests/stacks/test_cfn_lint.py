"""cfn-lint, a tool we did not write, reads every configuration's templates in one run; a finding
names the configurations it is in (<configuration>--<stack>.template.json). A clean run is kept
while the templates, .cfnlintrc.yaml and cfn-lint's version are the same (tests/scan_cache.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.configurations import CONFIGURATIONS, PROJECT_ROOT
from tests.scan_cache import files_under, scan_once
from tests.stacks.conftest import EveryTemplate


def test_cfn_lint_finds_nothing_in_any_configuration(every_template: EveryTemplate) -> None:
    templates = sorted(str(path) for path in every_template.folder.glob("*.template.json"))
    covered = [name for each in templates for name in every_template.named(each)]
    assert len(covered) == len(set(covered)) == 5 * len(CONFIGURATIONS)
    folder = every_template.folder
    command = [str(Path(sys.executable).parent / "cfn-lint"), "--format", "json", *templates]

    def run() -> dict[str, Any]:
        result = subprocess.run(
            command,
            cwd=PROJECT_ROOT,  # picks up .cfnlintrc.yaml and its reasons
            capture_output=True,
            text=True,
            check=False,
        )
        return {"findings": json.loads(result.stdout or "[]"), "stderr": result.stderr}

    found = scan_once(
        "cfn-lint",
        metadata.version("cfn-lint"),
        [
            *files_under(folder),
            (".cfnlintrc.yaml", PROJECT_ROOT / ".cfnlintrc.yaml"),
            ("tests/stacks/test_cfn_lint.py", Path(__file__)),
        ],
        run,
        clean=lambda result: result["findings"] == [],
    )
    named = [
        (every_template.named(f["Filename"]), f["Rule"]["Id"], f["Message"])
        for f in found["findings"]
    ]
    assert named == [], found["stderr"]
