"""The configuration reference (docs/configuration.md) is generated from the model and its example
configuration loads: neither may drift from the code."""

from __future__ import annotations

import pytest

from app_config import endpoint_health, load_settings
from tests.configurations import PROJECT_ROOT, cdk_json_context
from tools.config_reference import END, START, render
from tools.diagrams import (
    BLOCKS,
    NEW_CLUSTER_START_DRAWN_S,
    Block,
    current,
    default_settings,
    upgrade_timeline,
)


def test_configuration_reference_is_current() -> None:
    page = (PROJECT_ROOT / "docs" / "configuration.md").read_text()
    block = START + page.split(START, 1)[1].split(END, 1)[0] + END
    assert block == render(), "run `make config-docs` and commit docs/configuration.md"


def test_example_configuration_file_is_valid(tmp_path) -> None:
    page = (PROJECT_ROOT / "docs" / "configuration.md").read_text()
    example = page.split("A production file\nmight read:\n\n```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "prod.yaml").write_text(example)
    settings = load_settings({**cdk_json_context(), "config": str(tmp_path / "prod.yaml")})
    assert settings.observability.alarms.emails
    assert settings.serving.gcs_fault_tolerance.enabled


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
def test_diagram_is_drawn_from_the_current_code(block: Block) -> None:
    page = (PROJECT_ROOT / block.page).read_text()
    assert current(block, page) == block.render(default_settings()), (
        f"run `make config-docs` and commit {block.page}"
    )


def test_the_timeline_reads_the_configured_delays() -> None:
    """The picture moves with the settings it draws, not only with the code."""
    settings = default_settings()
    slower = settings.model_copy(
        update={
            "serving": settings.serving.model_copy(
                update={"old_cluster_deletion_delay_seconds": 400}
            )
        }
    )
    healthy = NEW_CLUSTER_START_DRAWN_S + endpoint_health.seconds_until_new_targets_healthy()
    assert f":crit, {healthy}, {NEW_CLUSTER_START_DRAWN_S + 400}\n" in upgrade_timeline(slower)
    assert f":crit, {healthy}, {NEW_CLUSTER_START_DRAWN_S + 180}\n" in upgrade_timeline(settings)


def test_every_warning_code_is_documented() -> None:
    """docs/configuration.md's warnings table lists every code a rule can give a warning."""
    from app_config.rules import WARNING, rules
    from tests.configurations import PROJECT_ROOT

    page = (PROJECT_ROOT / "docs" / "configuration.md").read_text()
    documented = [
        f"{rule.code}-<side>" if rule.per_side else rule.code
        for rule in rules()
        if rule.severity is WARNING
    ]
    assert [code for code in documented if f"| `{code}` |" not in page] == []
