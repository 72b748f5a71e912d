"""AWS IAM policy evaluation for requests within one account, as the IAM user guide states it
("Policy evaluation logic", "Policy evaluation for requests within a single account",
"AWS JSON policy elements: Condition operators", "AWS account principals"):

1. An explicit Deny in any applicable policy (SCP, resource-based, permissions boundary,
   identity-based) denies.
2. With SCPs in force, some SCP must allow the action; a permissions boundary must allow what an
   identity-based policy allows, or that allow does not count.
3. Within one account, an Allow in either the identity-based or the resource-based policy is
   enough, except where the resource-based policy names the account itself
   (arn:aws:iam::<account>:root): that delegates to the account's IAM policies, so the
   principal's identity-based policy must allow too. A resource policy naming another account
   never admits a principal of this one.
4. Across accounts ("Cross-account policy evaluation logic"), both must allow: the resource
   policy must name the principal or its account, and its identity-based policy must allow.
5. Otherwise the request is implicitly denied.

Supported: Action/NotAction, Resource/NotResource, Principal ("*", {"AWS": ...},
{"Service": ...}), and the condition operators the project's policies use.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Request:
    principal_arn: str  # the role (not the session) for aws:PrincipalArn
    account: str
    action: str
    resource: str
    context: dict[str, Any] = field(default_factory=dict)  # condition keys, e.g. aws:SourceVpce
    resource_account: str | None = None  # None: the principal's own account

    def full_context(self) -> dict[str, Any]:
        """The request's keys plus the global ones every request carries."""
        return {
            "aws:PrincipalArn": self.principal_arn,
            "aws:PrincipalAccount": self.account,
            **self.context,
        }

    @property
    def cross_account(self) -> bool:
        return self.resource_account not in (None, self.account)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _like(pattern: str, value: str) -> bool:
    # IAM wildcards: * any run, ? one character; case-sensitive for ARNs and strings.
    return fnmatch.fnmatchcase(value, pattern)


def _action_matches(statement: dict[str, Any], action: str) -> bool:
    def hit(patterns: Any) -> bool:  # actions are case-insensitive
        return any(_like(p.lower(), action.lower()) for p in _as_list(patterns))

    if "NotAction" in statement:
        return not hit(statement["NotAction"])
    return hit(statement.get("Action", []))


def _resource_matches(statement: dict[str, Any], resource: str) -> bool:
    if "NotResource" in statement:
        return not any(_like(p, resource) for p in _as_list(statement["NotResource"]))
    return any(_like(p, resource) for p in _as_list(statement.get("Resource", "*")))


def _condition_holds(operator: str, key: str, expected: Any, context: dict[str, Any]) -> bool:
    if_exists = operator.endswith("IfExists")
    operator = operator.removesuffix("IfExists")
    if key not in context:
        # A missing key: IfExists passes; negated operators match; positive ones do not.
        return if_exists or operator.startswith(("StringNot", "ArnNot", "NotIp"))
    actual = context[key]
    values = [str(v) for v in _as_list(expected)]
    if operator == "Bool":
        return str(actual).lower() in [v.lower() for v in values]
    if operator in ("StringEquals", "ArnEquals"):
        return str(actual) in values
    if operator in ("StringNotEquals", "ArnNotEquals"):
        return str(actual) not in values
    if operator in ("StringLike", "ArnLike"):
        return any(_like(v, str(actual)) for v in values)
    if operator in ("StringNotLike", "ArnNotLike"):
        return not any(_like(v, str(actual)) for v in values)
    if operator in ("IpAddress", "NotIpAddress"):
        address = ipaddress.ip_address(str(actual))
        inside = any(address in ipaddress.ip_network(v) for v in values)
        return inside if operator == "IpAddress" else not inside
    raise ValueError(f"condition operator {operator} is not modelled")


def _conditions_hold(statement: dict[str, Any], context: dict[str, Any]) -> bool:
    return all(
        _condition_holds(operator, key, expected, context)
        for operator, pairs in statement.get("Condition", {}).items()
        for key, expected in pairs.items()
    )


def _principal_matches(statement: dict[str, Any], request: Request) -> str | None:
    """ "direct", "account" (delegated to IAM) or None."""
    principal = statement.get("Principal")
    if principal == "*" or principal == {"AWS": "*"}:
        return "direct"
    if not isinstance(principal, dict):
        return None
    for arn in _as_list(principal.get("AWS", [])):
        if arn in (f"arn:aws:iam::{request.account}:root", request.account):
            return "account"
        if arn == request.principal_arn:
            return "direct"
    return None


def _statements(policy: dict[str, Any] | None) -> list[dict[str, Any]]:
    return _as_list(policy.get("Statement", [])) if policy else []


def _matching(
    policies: list[dict[str, Any]], request: Request, effect: str, with_principal: bool = False
) -> list[tuple[dict[str, Any], str | None]]:
    found = []
    for policy in policies:
        for statement in _statements(policy):
            if statement.get("Effect") != effect:
                continue
            who = _principal_matches(statement, request) if with_principal else "direct"
            if who is None:
                continue
            if (
                _action_matches(statement, request.action)
                and _resource_matches(statement, request.resource)
                and _conditions_hold(statement, request.full_context())
            ):
                found.append((statement, who))
    return found


def is_allowed(
    request: Request,
    *,
    identity: list[dict[str, Any]] = (),  # type: ignore[assignment]
    resource: dict[str, Any] | None = None,
    scps: list[dict[str, Any]] | None = None,
    boundary: dict[str, Any] | None = None,
) -> bool:
    identity = list(identity)
    resource_policies = [resource] if resource else []
    denies = (
        _matching(identity, request, "Deny")
        + _matching(resource_policies, request, "Deny", with_principal=True)
        + _matching(scps or [], request, "Deny")
        + _matching([boundary] if boundary else [], request, "Deny")
    )
    if denies:
        return False
    if scps is not None and not _matching(scps, request, "Allow"):
        return False
    identity_allows = bool(_matching(identity, request, "Allow"))
    if boundary is not None and identity_allows:
        identity_allows = bool(_matching([boundary], request, "Allow"))
    resource_allows = _matching(resource_policies, request, "Allow", with_principal=True)
    if request.cross_account:
        return identity_allows and bool(resource_allows)
    if any(who == "direct" for _, who in resource_allows):
        return True
    if any(who == "account" for _, who in resource_allows):
        return identity_allows
    return identity_allows
