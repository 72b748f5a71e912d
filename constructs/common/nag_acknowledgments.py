"""cdk-nag 3 acknowledgments, written next to the construct each one concerns.

cdk-nag matches acknowledgments by exact rule id; granular rules (IAM4, IAM5) need the finding in
brackets, e.g. ``AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/Name]``.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Token, Validations

from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """Acknowledge ``rule_id`` on ``scope`` and everything below it."""
    Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def aws_managed_policy_finding(policy_name: str) -> str:
    """The IAM4 rule id cdk-nag reports for an AWS managed policy attached by name."""
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy_name}]"


def account_in_finding(stack: Stack) -> str:
    """The stack's account as cdk-nag writes it in a finding: the id, or the pseudo parameter
    when the stack is account-agnostic."""
    return "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
