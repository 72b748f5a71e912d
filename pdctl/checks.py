"""A check's outcome, the same shape for every pdctl command that judges something."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""  # what to do when not ok
    # Not ok because the evidence cannot decide (no data, data that is not finite, a restart
    # in between): the check could not run to a verdict, which is not a "no".
    inconclusive: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def passed(name: str, detail: str) -> Check:
    return Check(name, True, detail)


def failed(name: str, detail: str, fix: str) -> Check:
    return Check(name, False, detail, fix)


def undecided(name: str, detail: str, fix: str) -> Check:
    return Check(name, False, detail, fix, inconclusive=True)


def exit_code(checks: Iterable[Check]) -> int:
    """0 when every check passed; 1 when one failed on evidence; 2 when none failed but one
    could not decide (pdctl.output's codes)."""
    checks = list(checks)
    if any(not check.ok and not check.inconclusive for check in checks):
        return 1
    if any(check.inconclusive for check in checks):
        return 2
    return 0
