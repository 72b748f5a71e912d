"""Fixtures of the stack tests: one folder holding every configuration's templates, for the
scanners that read them all in one run (a process start and rule load per run costs more than
the templates themselves)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.configurations import CONFIGURATIONS
from tests.conftest import Synthesized


@dataclass(frozen=True)
class EveryTemplate:
    """Every configuration's templates, each distinct template once: configurations share
    templates (a network stack, say, is the same in several), and a scanner's findings depend on
    a template's text alone. ``names`` maps each file to the <configuration>--<stack> templates
    it stands for, so a finding names every configuration it is in."""

    folder: Path
    names: dict[str, list[str]]

    def named(self, path: str) -> list[str]:
        return self.names.get(Path(path).name, [path])


@pytest.fixture(scope="session")
def every_template(
    synthesize: Callable[[str], Synthesized], tmp_path_factory: pytest.TempPathFactory
) -> EveryTemplate:
    folder = tmp_path_factory.mktemp("every-template")
    by_text: dict[str, str] = {}
    names: dict[str, list[str]] = {}
    # Those another worker is synthesizing now come last (by then likely done): no idle wait.
    ready = {name: synthesize(name, wait=False) for name in CONFIGURATIONS}
    for name in CONFIGURATIONS:
        synthesized = ready[name] or synthesize(name)
        for template in sorted(synthesized.outdir.glob("*.template.json")):
            text = template.read_text()
            digest = hashlib.sha256(text.encode()).hexdigest()
            stands_for = f"{name}--{template.name}"
            if digest not in by_text:
                by_text[digest] = stands_for
                (folder / stands_for).write_text(text)
                names[stands_for] = []
            names[by_text[digest]].append(stands_for)
    return EveryTemplate(folder, names)
