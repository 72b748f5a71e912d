"""Each configuration is synthesized once per test session; every test reads the same result."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import app
from tests.configurations import context_for

STACK_ROLES = ("network", "cluster", "serving", "observability")


@dataclass(frozen=True)
class Synthesized:
    built: app.BuiltApp
    outdir: Path
    templates: dict[str, dict[str, Any]]  # by stack role (STACK_ROLES)

    def resources(self, role: str, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.templates[role]["Resources"].items()
            if resource["Type"] == resource_type
        }


@pytest.fixture(scope="session")
def synthesize(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Synthesized]:
    cache: dict[str, Synthesized] = {}

    def get(name: str) -> Synthesized:
        if name not in cache:
            outdir = tmp_path_factory.mktemp(f"cdk-out-{name}")
            built = app.build(context_for(name), outdir=str(outdir))
            built.app.synth()  # runs the nag packs; an unacknowledged finding raises here
            templates = {
                role: json.loads(
                    (outdir / f"{built.settings.stack_name(role)}.template.json").read_text()
                )
                for role in STACK_ROLES
            }
            cache[name] = Synthesized(built, outdir, templates)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def default_app(synthesize: Callable[[str], Synthesized]) -> Synthesized:
    return synthesize("default")


@pytest.fixture(scope="session")
def public_app(synthesize: Callable[[str], Synthesized]) -> Synthesized:
    return synthesize("public-endpoint")


@pytest.fixture(scope="session")
def reserved_app(synthesize: Callable[[str], Synthesized]) -> Synthesized:
    return synthesize("reserved-capacity")
