"""checkov, a tool we did not write, reads every configuration's templates in one run."""

from __future__ import annotations

from tests.checkov import run_checkov
from tests.configurations import CONFIGURATIONS
from tests.stacks.conftest import EveryTemplate


def test_checkov_has_no_unskipped_failures_in_any_configuration(
    every_template: EveryTemplate,
) -> None:
    covered = [name for names in every_template.names.values() for name in names]
    assert len(covered) == len(set(covered)) == 5 * len(CONFIGURATIONS)
    result = run_checkov(every_template.folder, "cloudformation")
    failed = [
        (check, every_template.named(path), resource) for check, path, resource in result.failed
    ]
    assert failed == [], result.stderr
    assert result.passed > 0, "checkov evaluated nothing"
