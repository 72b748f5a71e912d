"""checkov, a tool we did not write, reads every configuration's templates in one run (each
template's clean result kept while its bytes and checkov are the same: tests/scan_cache.py)."""

from __future__ import annotations

from tests.checkov import run_checkov_each
from tests.configurations import CONFIGURATIONS
from tests.stacks.conftest import EveryTemplate


def test_checkov_has_no_unskipped_failures_in_any_configuration(
    every_template: EveryTemplate,
) -> None:
    covered = [name for names in every_template.names.values() for name in names]
    assert len(covered) == len(set(covered)) == 5 * len(CONFIGURATIONS)
    templates = sorted(every_template.folder.glob("*.template.json"))
    results = run_checkov_each([(path.name, path) for path in templates], "cloudformation")
    failed = [
        (check, every_template.named(path), resource)
        for result in results.values()
        for check, path, resource in result.failed
    ]
    assert failed == [], [result.stderr for result in results.values() if result.failed]
    evaluated_nothing = [name for name, result in results.items() if result.passed == 0]
    assert evaluated_nothing == [], "checkov evaluated nothing in these"
