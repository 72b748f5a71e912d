"""A cdk-nag rule written as a plain Python function, adapted to cdk-nag's jsii interface."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jsii
from aws_cdk import CfnResource
from cdk_nag import IApplyRule, NagMessageLevel, NagRuleCompliance

Check = Callable[[CfnResource], NagRuleCompliance]


@dataclass(frozen=True)
class NagRule:
    suffix: str  # the rule id is "<pack>-<suffix>"
    info: str
    explanation: str
    check: Check
    # The L1 classes the check can judge: the pack applies it to these only, since every
    # application is a round trip through jsii and NOT_APPLICABLE elsewhere changes nothing.
    resource_types: tuple[type[CfnResource], ...]

    def applies_to(self, node: CfnResource) -> bool:
        return isinstance(node, self.resource_types)


@jsii.implements(IApplyRule)
class AppliedRule:
    """IApplyRule for one rule on one resource. jsii reads interface members through properties
    defined on the class; plain instance attributes are invisible to it."""

    def __init__(self, rule: NagRule, node: CfnResource) -> None:
        self._rule = rule
        self._node = node

    @property
    def node(self) -> CfnResource:
        return self._node

    @property
    def rule_suffix_override(self) -> str:
        return self._rule.suffix

    @property
    def info(self) -> str:
        return self._rule.info

    @property
    def explanation(self) -> str:
        return self._rule.explanation

    @property
    def level(self) -> NagMessageLevel:
        return NagMessageLevel.ERROR

    def rule(self, node: CfnResource) -> NagRuleCompliance:
        return self._rule.check(node)
