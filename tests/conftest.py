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

STACK_ROLES = ("network", "cluster", "gpu-nodes", "serving", "observability")


def cfn_text(value: object) -> str:
    """A CloudFormation string value as text, each token (Ref, GetAtt, import) shown as
    <token>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(cfn_text(part) for part in parts)
    return "<token>"


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

    def gpu_node_warnings(self) -> list[str]:
        """The gpu-nodes stack's synth warnings (`cdk synth` prints them), as text."""
        import aws_cdk as cdk

        found = cdk.assertions.Annotations.from_stack(self.built.stacks.gpu_nodes).find_warning(
            "*", cdk.assertions.Match.any_value()
        )
        return [str(message.entry.data) for message in found]

    def irsa_trust(self, role: str, role_id: str) -> tuple[dict[str, Any], str]:
        """The role's one trust statement, and its claims as JSON text: the conditions sit in a
        CfnJson resource because their keys contain the OIDC issuer (a token)."""
        resources = self.templates[role]["Resources"]
        (statement,) = resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        claims_id = statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]
        return statement, json.dumps(resources[claims_id]["Properties"]["Value"])


@pytest.fixture(scope="session")
def synthesize(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Synthesized]:
    """``synthesize(name)``, or ``synthesize(name, {"dotted.key": "value"})`` for a variant of
    a configuration that one test module needs (each variant is synthesized once, too)."""
    cache: dict[str, Synthesized] = {}

    def get(name: str, overrides: dict[str, str] | None = None) -> Synthesized:
        key = name + (json.dumps(overrides, sort_keys=True) if overrides else "")
        if key not in cache:
            outdir = tmp_path_factory.mktemp(f"cdk-out-{name}")
            built = app.build(context_for(name, **(overrides or {})), outdir=str(outdir))
            built.app.synth()  # runs the nag packs; an unacknowledged finding raises here
            templates = {
                role: json.loads(
                    (outdir / f"{built.settings.stack_name(role)}.template.json").read_text()
                )
                for role in STACK_ROLES
            }
            cache[key] = Synthesized(built, outdir, templates)
        return cache[key]

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
