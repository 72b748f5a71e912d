"""The README's configuration reference is generated from the model; it must not drift."""

from __future__ import annotations

from tests.configurations import PROJECT_ROOT
from tools.config_reference import END, START, render


def test_readme_configuration_reference_is_current() -> None:
    readme = (PROJECT_ROOT / "README.md").read_text()
    block = START + readme.split(START, 1)[1].split(END, 1)[0] + END
    assert block == render(), "run `make config-docs` and commit the README"
