"""Each configuration is synthesized once per test run, whatever the number of pytest-xdist
workers: the first worker to ask for one synthesizes it into a folder all workers share (under
a file lock), and every test then reads the cloud assembly from disk, as `cdk synth` leaves it.

What a test reads is the CLI's own output (templates, each stack's metadata file with its
warnings and acknowledgments, the validation report), so the suite checks what a user gets. The
construct tree itself (for the few tests that run a rule pack over constructs) is built lazily,
in the worker that asks, only when a test asks for it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

import app
from app_config import Settings
from serving_manifests import ServingManifests
from tests.configurations import CONFIGURATIONS, context_for, render_deployed, settings_for

STACK_ROLES = ("network", "cluster", "gpu-nodes", "serving", "observability")
_DONE = "synthesized"
# Construct trees built in this worker, by cache key (the worker that synthesized a
# configuration keeps its tree; another builds it only if a test asks for constructs).
_BUILT: dict[str, app.BuiltApp] = {}


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
    """One synthesized configuration: a name of tests/configurations.py, with the overrides of a
    variant a test needs, and the cloud assembly folder it was synthesized into."""

    name: str
    overrides: Mapping[str, str]
    outdir: Path
    key: str = field(repr=False)

    @cached_property
    def settings(self) -> Settings:
        return settings_for(self.name, **self.overrides)

    @cached_property
    def templates(self) -> dict[str, dict[str, Any]]:
        """By stack role (STACK_ROLES)."""
        return {
            role: json.loads(
                (self.outdir / f"{self.settings.stack_name(role)}.template.json").read_text()
            )
            for role in STACK_ROLES
        }

    @cached_property
    def built(self) -> app.BuiltApp:
        """The construct tree, for tests that inspect constructs (rule packs, objects a construct
        keeps); built in this worker on first use."""
        if self.key not in _BUILT:
            _BUILT[self.key] = app.build(
                _context(self.name, self.overrides), outdir=str(self.outdir / "rebuilt")
            )
        return _BUILT[self.key]

    @cached_property
    def manifests(self) -> ServingManifests:
        """The serving stack's Kubernetes objects, rendered from the settings as the stack
        renders them (with example values for what CloudFormation returns at deploy)."""
        return render_deployed(self.settings)

    def dependencies(self, role: str) -> set[str]:
        """The stack roles this stack deploys after, from the assembly's manifest."""
        manifest = json.loads((self.outdir / "manifest.json").read_text())
        names = {self.settings.stack_name(each): each for each in STACK_ROLES}
        needs = manifest["artifacts"][self.settings.stack_name(role)].get("dependencies", [])
        return {names[name] for name in needs if name in names}

    def resources(self, role: str, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.templates[role]["Resources"].items()
            if resource["Type"] == resource_type
        }

    def metadata(self, role: str) -> dict[str, list[dict[str, Any]]]:
        """The stack's metadata file (construct path -> entries), as the CLI reads it."""
        return json.loads(
            (self.outdir / f"{self.settings.stack_name(role)}.metadata.json").read_text()
        )

    def _entries(self, kind: str, role: str | None) -> list[str]:
        roles = STACK_ROLES if role is None else (role,)
        return [
            str(entry["data"])
            for each in roles
            for entries in self.metadata(each).values()
            for entry in entries
            if entry["type"] == kind
        ]

    def warnings(self, role: str | None = None) -> list[str]:
        """The synth warnings (what `cdk synth` prints) of one stack, or of all, as text."""
        return self._entries("aws:cdk:warning", role)

    def infos(self, role: str | None = None) -> list[str]:
        """The synth's info lines (acknowledged warnings' reasons among them)."""
        return self._entries("aws:cdk:info", role)

    def gpu_node_warnings(self) -> list[str]:
        return self.warnings("gpu-nodes")

    def acknowledged_rules(self) -> Iterator[tuple[str, str, str]]:
        """(construct path, rule id, reason) of every rule-pack acknowledgment in the assembly."""
        for role in STACK_ROLES:
            for path, entries in self.metadata(role).items():
                for entry in entries:
                    if entry["type"] == "aws:cdk:acknowledged-rules":
                        for rule_id, reason in entry["data"].items():
                            yield path, rule_id.removeprefix("Annotation::"), reason

    def validation_report(self) -> dict[str, Any]:
        """The policy validation report the CDK writes after running the rule packs."""
        return json.loads((self.outdir / "validation-report.json").read_text())

    def irsa_trust(self, role: str, role_id: str) -> tuple[dict[str, Any], str]:
        """The role's one trust statement, and its claims as JSON text: the conditions sit in a
        CfnJson resource because their keys contain the OIDC issuer (a token)."""
        resources = self.templates[role]["Resources"]
        (statement,) = resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        claims_id = statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]
        return statement, json.dumps(resources[claims_id]["Properties"]["Value"])


def _context(name: str, overrides: Mapping[str, str]) -> dict[str, Any]:
    return context_for(name, **overrides)


def shared_folder(factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder every xdist worker of this run sees (under the parent of the workers' own
    folders), for work done once per run whichever worker asks first."""
    base = factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    shared = root / name
    shared.mkdir(exist_ok=True)
    return shared


def _synthesize_into(key: str, name: str, overrides: Mapping[str, str], outdir: Path) -> None:
    """Synthesize with the rule packs registered, as `cdk synth` does: an unacknowledged
    finding raises here and fails every test of the configuration."""
    built = app.build(_context(name, overrides), outdir=str(outdir))
    built.app.synth()
    _BUILT[key] = built


@pytest.fixture(scope="session")
def synthesize(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Synthesized]:
    """``synthesize(name)``, or ``synthesize(name, {"dotted.key": "value"})`` for a variant of a
    configuration one test needs (a variant is synthesized once per run, too)."""
    shared = shared_folder(tmp_path_factory, "synthesized")
    cache: dict[str, Synthesized] = {}

    def get(name: str, overrides: Mapping[str, str] | None = None) -> Synthesized:
        if name not in CONFIGURATIONS:
            raise KeyError(f"{name!r} is not in tests/configurations.py")
        given = dict(overrides or {})
        key = hashlib.sha256(json.dumps([name, given], sort_keys=True).encode()).hexdigest()[:16]
        if key not in cache:
            outdir = shared / f"{name}-{key}"
            with (shared / f"{key}.lock").open("w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not (outdir / _DONE).exists():
                    _synthesize_into(key, name, given, outdir)
                    (outdir / _DONE).touch()
            cache[key] = Synthesized(name, given, outdir, key)
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
