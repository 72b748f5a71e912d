"""Acknowledged warnings (`acknowledged_warnings`): a warning the team has weighed is named by its
code with the reason, and `cdk synth` then prints the reason instead of the warning, so that
`cdk synth --strict` can gate CI on a configuration with no unweighed warning.

An acknowledgment must name a warning that exists, and one whose warning no longer fires is
itself a warning: a stale acknowledgment would silently cover the warning when it returns for
another cause.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.rules import WARNING, Rule, rules, warning_codes

if TYPE_CHECKING:
    from app_config.model import Settings

UNUSED = "unused-acknowledgment"
# Warnings whose fix is to change the value, never to keep it: example values from the docs.
NOT_ACKNOWLEDGEABLE = frozenset({"documentation-placeholder", UNUSED})


def acknowledgeable_codes() -> list[str]:
    return sorted(code for code in warning_codes() if code not in NOT_ACKNOWLEDGEABLE)


def unknown_codes(settings: Settings) -> Iterator[Finding]:
    known = acknowledgeable_codes()
    for index, acknowledgment in enumerate(settings.acknowledged_warnings):
        if acknowledgment.code not in known:
            reason = (
                "cannot be acknowledged: replace the value it is about"
                if acknowledgment.code in NOT_ACKNOWLEDGEABLE
                else f"is not a warning code of this app; codes: {', '.join(known)}"
            )
            yield Finding(f"acknowledged_warnings[{index}].code", reason, acknowledgment.code)


def repeated_codes(settings: Settings) -> Iterator[Finding]:
    """A warning is acknowledged once, with one reason: synth prints one reason for it
    (stacks/findings.py), and a second would be dropped unread."""
    first: dict[str, int] = {}
    for index, acknowledgment in enumerate(settings.acknowledged_warnings):
        earlier = first.setdefault(acknowledgment.code, index)
        if earlier != index:
            yield Finding(
                f"acknowledged_warnings[{index}].code",
                f"acknowledges {acknowledgment.code} again (acknowledged_warnings[{earlier}] "
                "does already); synth prints one reason per warning: give it once, with both "
                "reasons in it if both hold",
                acknowledgment.code,
            )


def fired_warning_codes(settings: Settings) -> set[str]:
    """The codes of the warnings the configuration raises, acknowledged or not."""
    return {
        finding.code
        for rule in rules()
        if rule.severity is WARNING and rule.code != UNUSED
        for finding in rule.findings(settings)
    }


def unused(settings: Settings) -> Iterator[Finding]:
    if not settings.acknowledged_warnings:
        return
    fired, known = fired_warning_codes(settings), set(acknowledgeable_codes())
    for index, acknowledgment in enumerate(settings.acknowledged_warnings):
        if acknowledgment.code in known and acknowledgment.code not in fired:
            yield Finding(
                f"acknowledged_warnings[{index}]",
                f"acknowledges {acknowledgment.code}, which this configuration does not raise: "
                "remove the acknowledgment, so that it cannot cover the warning when it returns",
                acknowledgment.code,
            )


_EVERYTHING = frozenset(
    {"acknowledged_warnings", "account", "region", "network", "cluster", "gpu_nodes", "serving"}
)
RULES = (
    Rule("unknown-warning-code", frozenset({"acknowledged_warnings"}), unknown_codes),
    Rule("repeated-acknowledgment", frozenset({"acknowledged_warnings"}), repeated_codes),
    Rule(UNUSED, _EVERYTHING, unused, WARNING),
)
