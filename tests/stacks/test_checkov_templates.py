"""checkov, a tool we did not write, reads every configuration's templates in one run."""

from __future__ import annotations

from pathlib import Path

from tests.checkov import run_checkov


def test_checkov_has_no_unskipped_failures_in_any_configuration(every_template: Path) -> None:
    result = run_checkov(every_template, "cloudformation")
    assert result.failed == [], result.stderr
    assert result.passed > 0, "checkov evaluated nothing"
