"""Each configuration is synthesized once, whatever the number of pytest-xdist workers and
however many runs ask for it while the app's inputs stay the same: the first worker to ask for
one synthesizes it (under a file lock) into build/test-synth/<inputs>/, a folder named by a hash
of everything a synth reads (the app's code and data, cdk.json, the examples, the installed
packages' versions, the CDK_ environment); every test then reads the cloud assembly from disk, as
`cdk synth` leaves it. A change to any input names a new folder, so a stale assembly is never
read; TEST_SYNTH_CACHE=run keeps the cache to one run (CI, a bisect that trusts nothing).

What a test reads is the CLI's own output (templates, each stack's metadata file with its
warnings and acknowledgments, the validation report), so the suite checks what a user gets. The
construct tree itself (for the few tests that run a rule pack over constructs) is built lazily,
in the worker that asks, only when a test asks for it.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from app_config import Settings
from serving_manifests import ServingManifests
from tests.configurations import (
    CONFIGURATIONS,
    PROJECT_ROOT,
    context_for,
    render_deployed,
    settings_for,
)

if TYPE_CHECKING:
    import app

STACK_ROLES = ("network", "cluster", "gpu-nodes", "serving", "observability")
# Construct trees built in this worker, by cache key (the worker that synthesized a
# configuration keeps its tree; another builds it only if a test asks for constructs).
_BUILT: dict[str, app.BuiltApp] = {}


# Workers `-n auto` (pyproject's addopts) starts beyond one per core: about a fifth of a run's
# worker time is tests waiting on purpose (pdctl's deadlines against hostile servers, preStop
# drains, the autoscaler sidecar's restart, the EFA-check linger), with their core idle; a worker
# more runs other tests meanwhile (docs/verification.md "Benchmarks", 2026-12-07).
EXTRA_WORKERS = 1


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: the cores this process may run on, plus EXTRA_WORKERS; None (xdist's own
    count) when PYTEST_XDIST_AUTO_NUM_WORKERS names one."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + EXTRA_WORKERS


# Generation 0 collects after this many allocations (Python's default: 700); the older two after
# this many collections of the one below (default: 10).
GC_THRESHOLDS = (20_000, 20, 20)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built (each worker's 4,000 test items, their modules, the fixtures'
    definitions) lives until the run ends: it is frozen out of the garbage collector, which
    otherwise walks it in every collection of the older generations, and the young generation
    is collected less often, as the tests allocate short-lived objects by the million (pydantic
    validation, YAML, templates read as JSON). Workers' CPU in a warm run: 69 to 72 s before,
    61 to 63 s after (docs/verification.md "Benchmarks", 2026-12-07 (night)). A test
    that needs an object gone calls gc.collect() itself, as it would have to anyway."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Nothing runs after this but the process's exit: every object it holds is frozen out of
    the garbage collector, so the interpreter's teardown does not walk them all in a last
    collection. Each xdist worker holds aws-cdk-lib's bindings and its share of 4,000 tests, and
    the controller waits for every worker's exit before the run ends, so their teardown was the
    run's last seconds: from the last worker's end to the run's, a median of 3.2 s without this
    and 1.1 s with it, 5 runs each (docs/verification.md "Benchmarks", 2026-12-07)."""
    gc.freeze()


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
            import app  # aws-cdk-lib and its Node.js process: only in a worker that builds

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

    def in_every_stack(self, resource_type: str) -> list[dict[str, Any]]:
        """The resources of this type, whichever stack holds them."""
        return [
            resource
            for role in STACK_ROLES
            for resource in self.resources(role, resource_type).values()
        ]

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


# What a synth does not read: the tests (but for the configurations and this file), the docs, and
# pdctl and tools (no app-side module imports either: tests/config/test_layout.py); generated and
# installed folders.
_NOT_SYNTH_INPUTS = frozenset(
    {"tests", "docs", "pdctl", "tools", "build", "cdk.out", "node_modules", "__pycache__"}
)
_SYNTH_TEST_INPUTS = ("tests/configurations.py", "tests/conftest.py")
_KEPT_INPUT_FOLDERS = 3  # the newest cache folders kept: switching branches back stays warm


def synth_inputs_digest(root: Path = PROJECT_ROOT) -> str:
    """A hash of everything a synth of the configurations reads: every file of the checkout but
    those in _NOT_SYNTH_INPUTS and hidden folders (venvs, .git), the two test files that name the
    configurations, the installed distributions' names and versions (aws-cdk-lib, cdk-nag, jsii,
    Node.js's wheel) and the CDK_ environment variables the CLI and the loader read."""
    digest = hashlib.sha256()
    paths = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [
            each
            for each in subfolders
            if each not in _NOT_SYNTH_INPUTS
            and not each.startswith(".")
            and not each.endswith(".egg-info")
        ]
        paths += [Path(folder, each) for each in files]
    paths += [root / each for each in _SYNTH_TEST_INPUTS]
    for path in sorted(paths):
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    packages = sorted(f"{each.name}=={each.version}" for each in metadata.distributions())
    digest.update("\n".join(packages).encode())
    cdk_environment = sorted((k, v) for k, v in os.environ.items() if k.startswith("CDK_"))
    digest.update(json.dumps([sys.version, cdk_environment]).encode())
    return digest.hexdigest()[:16]


def synth_cache_folder(factory: pytest.TempPathFactory) -> Path:
    """build/test-synth/<inputs digest>/, shared by the workers of this run and by later runs
    with the same inputs; or, under TEST_SYNTH_CACHE=run, a folder of this run only."""
    if os.environ.get("TEST_SYNTH_CACHE") == "run":
        return shared_folder(factory, "synthesized")
    cache = PROJECT_ROOT / "build" / "test-synth"
    folder = cache / synth_inputs_digest()
    folder.mkdir(parents=True, exist_ok=True)
    os.utime(folder)  # the newest, for the pruning below
    older = sorted(
        (each for each in cache.iterdir() if each.is_dir()),
        key=lambda each: each.stat().st_mtime,
        reverse=True,
    )[_KEPT_INPUT_FOLDERS:]
    for each in older:
        shutil.rmtree(each, ignore_errors=True)
    return folder


def _synthesize_into(key: str, name: str, overrides: Mapping[str, str], outdir: Path) -> None:
    """Synthesize with the rule packs registered, as `cdk synth` does: an unacknowledged
    finding raises here and fails every test of the configuration (and nothing is cached). The
    assembly is written beside its folder and renamed into place whole, so an interrupted synth
    leaves nothing a later run would read."""
    import app  # aws-cdk-lib and its Node.js process: only in a worker that synthesizes

    writing = outdir.with_name(outdir.name + ".writing")
    shutil.rmtree(writing, ignore_errors=True)
    built = app.build(_context(name, overrides), outdir=str(writing))
    built.app.synth()
    writing.rename(outdir)
    _BUILT[key] = built


@pytest.fixture(scope="session")
def synthesize(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Synthesized]:
    """``synthesize(name)``, or ``synthesize(name, {"dotted.key": "value"})`` for a variant of a
    configuration one test needs (a variant is synthesized once, too)."""
    shared = synth_cache_folder(tmp_path_factory)
    cache: dict[str, Synthesized] = {}

    def get(
        name: str, overrides: Mapping[str, str] | None = None, *, wait: bool = True
    ) -> Synthesized | None:
        """``wait=False``: None while another worker is synthesizing it (a caller with other
        configurations to go through synthesizes those first instead of idling)."""
        if name not in CONFIGURATIONS:
            raise KeyError(f"{name!r} is not in tests/configurations.py")
        given = dict(overrides or {})
        key = hashlib.sha256(json.dumps([name, given], sort_keys=True).encode()).hexdigest()[:16]
        if key not in cache:
            outdir = shared / f"{name}-{key}"
            with (shared / f"{key}.lock").open("w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    return None
                if not outdir.exists():
                    _synthesize_into(key, name, given, outdir)
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
