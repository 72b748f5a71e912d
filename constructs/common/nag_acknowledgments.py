"""cdk-nag 3 acknowledgments, written next to the construct each one concerns.

cdk-nag matches acknowledgments by exact rule id; granular rules (IAM4, IAM5) need the finding in
brackets, e.g. ``AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/Name]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Acknowledgment, Stack, Token, Validations

from catalog.regions import partition
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """Acknowledge ``rule_id`` on ``scope`` and everything below it."""
    Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def aws_managed_policy_finding(policy_name: str) -> str:
    """The IAM4 rule id cdk-nag reports for an AWS managed policy attached by name."""
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy_name}]"


@dataclass(frozen=True)
class AccountArn:
    """An ARN in the stack's account and region, for a policy, and the IAM5 rule id cdk-nag
    reports for a wildcard in it."""

    arn: str  # the account may be a token (account-agnostic stacks)
    finding: str


def account_arn(stack: Stack, service: str, resource: str) -> AccountArn:
    """A literal partition and region, so the ARN reads as text in the finding; the account as
    cdk-nag writes it: the id, or the pseudo parameter when the stack is account-agnostic."""
    prefix = f"arn:{partition(stack.region)}:{service}:{stack.region}"
    shown = "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
    return AccountArn(
        arn=f"{prefix}:{stack.account}:{resource}",
        finding=f"AwsSolutions-IAM5[Resource::{prefix}:{shown}:{resource}]",
    )
