"""The rules of the app, each one function in one place, returning findings.

A rule is a relation between settings, a limit of a consuming service, or a fact of the catalog
applied to the settings. Rules that judge one section alone live with that section (its pydantic
validators); the rules here read several sections or say what synth should warn about. The
loader reports their errors before any construct exists, the stacks print their warnings
(`stacks/findings.py`), and `pdctl plan` and `pdctl preflight` call the same functions, so no
tool re-derives a rule.

Each rule declares the top-level settings it reads: it runs only when all of them are valid (an
invalid one has its own finding), so one run reports every problem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app_config.errors import Finding, Severity
from app_config.node_labels import GPU_ROLES

if TYPE_CHECKING:
    from app_config.model import Settings

ERROR, WARNING = Severity.ERROR, Severity.WARNING


@dataclass(frozen=True)
class Rule:
    """``code`` is stable: tests, docs and acknowledgments name it. A rule whose findings are
    about one side gives them the code ``<code>-<side>`` (``one-node-decode``)."""

    code: str
    reads: frozenset[str]
    check: Callable[[Settings], Iterable[Finding]]
    severity: Severity = ERROR
    per_side: bool = False
    # Where `cdk synth` reports a warning: the stack whose resources it is about.
    stack: str = "cluster"

    @property
    def codes(self) -> tuple[str, ...]:
        if self.per_side:
            return tuple(f"{self.code}-{role}" for role in GPU_ROLES)
        return (self.code,)

    def findings(self, settings: Settings) -> list[Finding]:
        """The check's findings, each with this rule's severity and (unless the check gave a
        per-side code) its code."""
        found = []
        for finding in self.check(settings):
            code = finding.code if finding.code in self.codes else self.code
            found.append(replace(finding, code=code, severity=self.severity))
        return found


def _registry() -> tuple[Rule, ...]:
    from app_config.rules import (
        access,
        acknowledgments,
        alarms,
        capacity,
        derived_names,
        engine_options,
        existing_cluster,
        existing_vpc,
        image,
        kv_transfer,
        model_fit,
        model_parallel,
        network,
        node_fit,
        replica_fit,
        scaling,
        timeouts,
        updates,
    )

    return (
        *network.RULES,
        *existing_vpc.RULES,
        *existing_cluster.RULES,
        *replica_fit.RULES,
        *engine_options.RULES,
        *image.RULES,
        *access.RULES,
        *alarms.RULES,
        *capacity.RULES,
        *updates.RULES,
        *timeouts.RULES,
        *kv_transfer.RULES,
        *model_fit.RULES,
        *model_parallel.RULES,
        *derived_names.RULES,
        *node_fit.RULES,
        *scaling.RULES,
        *acknowledgments.RULES,
    )


_RULES: tuple[Rule, ...] | None = None


def rules() -> tuple[Rule, ...]:
    global _RULES
    if _RULES is None:
        _RULES = _registry()
    return _RULES


def evaluate(settings: Settings, valid: Iterable[str] | None = None) -> list[Finding]:
    """Every finding of every rule whose settings are all in ``valid`` (all, when None)."""
    from app_config.model import Settings as SettingsModel

    valid = set(SettingsModel.model_fields if valid is None else valid)
    return [
        finding for rule in rules() if rule.reads <= valid for finding in rule.findings(settings)
    ]


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.severity is ERROR]


def warnings(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.severity is WARNING]


def warning_codes() -> dict[str, Rule]:
    """Every code a warning can carry, with its rule: what the configuration may acknowledge."""
    return {code: rule for rule in rules() if rule.severity is WARNING for code in rule.codes}


def side_finding(role: str, code: str, path: str, message: str, value: object = None) -> Finding:
    """A finding about one side, under its per-side code."""
    return Finding(path, message, value, code=f"{code}-{role}")
