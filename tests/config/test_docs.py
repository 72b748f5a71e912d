"""The configuration reference (docs/configuration.md) is generated from the model and its example
configuration loads: neither may drift from the code."""

from __future__ import annotations

from app_config import load_settings
from tests.configurations import PROJECT_ROOT, cdk_json_context
from tools.config_reference import END, START, render


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
