"""Fixtures of the stack tests: one folder holding every configuration's templates, for the
scanners that read them all in one run (a process start and rule load per run costs more than
the templates themselves)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.configurations import CONFIGURATIONS
from tests.conftest import Synthesized


@pytest.fixture(scope="session")
def every_template(
    synthesize: Callable[[str], Synthesized], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """One folder with every configuration's templates, named <configuration>--<stack>."""
    folder = tmp_path_factory.mktemp("every-template")
    for name in CONFIGURATIONS:
        for template in synthesize(name).outdir.glob("*.template.json"):
            (folder / f"{name}--{template.name}").write_text(template.read_text())
    return folder
