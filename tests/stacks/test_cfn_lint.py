"""cfn-lint, a tool we did not write, reads every configuration's templates in one run; a finding
names the configurations it is in (<configuration>--<stack>.template.json). Each template's
clean result is kept while its bytes, .cfnlintrc.yaml and cfn-lint's version are the same
(tests/scan_cache.py): after a change only the templates it changed are linted again."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.configurations import CONFIGURATIONS, PROJECT_ROOT
from tests.scan_cache import scan_each, with_files
from tests.stacks.conftest import EveryTemplate


def test_cfn_lint_finds_nothing_in_any_configuration(every_template: EveryTemplate) -> None:
    templates = sorted(every_template.folder.glob("*.template.json"))
    covered = [name for each in templates for name in every_template.named(str(each))]
    assert len(covered) == len(set(covered)) == 5 * len(CONFIGURATIONS)

    def run(files: list[tuple[str, Path]]) -> dict[str, list[dict[str, Any]]]:
        result = subprocess.run(
            [str(Path(sys.executable).parent / "cfn-lint"), "--format", "json"]
            + [str(path) for _, path in files],
            cwd=PROJECT_ROOT,  # picks up .cfnlintrc.yaml and its reasons
            capture_output=True,
            text=True,
            check=False,
        )
        findings = json.loads(result.stdout or "[]")
        assert result.returncode == 0 or findings, result.stderr  # ran, or found something
        by_file: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in files}
        for finding in findings:
            by_file[Path(finding["Filename"]).name].append(finding)
        return by_file

    found = scan_each(
        "cfn-lint",
        with_files(
            metadata.version("cfn-lint"),
            [
                (".cfnlintrc.yaml", PROJECT_ROOT / ".cfnlintrc.yaml"),
                ("tests/stacks/test_cfn_lint.py", Path(__file__)),
            ],
        ),
        [(path.name, path) for path in templates],
        run,
        clean=lambda findings: findings == [],
    )
    named = [
        (every_template.named(f["Filename"]), f["Rule"]["Id"], f["Message"])
        for findings in found.values()
        for f in findings
    ]
    assert named == []
