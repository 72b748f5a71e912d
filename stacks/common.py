"""Small policies shared by every stack, derived from Settings in one place."""

from __future__ import annotations

from aws_cdk import DefaultStackSynthesizer, Environment, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs

from app_config import Settings


def removal_policy(settings: Settings) -> RemovalPolicy:
    """What `cdk destroy` does to keys and log groups (resources that hold data).

    Retained except when the create that made them rolls back (CloudFormation's
    RetainExceptOnCreate): several log groups have names fixed by AWS (Container Insights, the
    EKS control plane), and a retained leftover of a failed first deploy would make the retry
    fail with "already exists"."""
    if settings.retain_data_on_destroy:
        return RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
    return RemovalPolicy.DESTROY


def apply_log_retention_policy(stack: Stack, settings: Settings) -> None:
    """Every log group of the stack, aws-cdk-lib's own included (its providers' groups are
    Retain by default), follows retain_data_on_destroy: with false, a log group must not stay
    behind encrypted with a key that goes."""
    for child in stack.node.find_all():
        if isinstance(child, logs.CfnLogGroup):
            child.apply_removal_policy(removal_policy(settings))


def environment(settings: Settings) -> Environment:
    """A concrete region always (zones are per region); the account only when configured."""
    return Environment(account=settings.account, region=settings.region)


def synthesizer(settings: Settings) -> DefaultStackSynthesizer | None:
    """The bootstrap the stacks deploy with: this app's own when bootstrap_qualifier names one
    (its roles are cdk-<qualifier>-...; `cdk bootstrap --qualifier <it>` creates them), else
    the CDK's default (None), the account's shared bootstrap."""
    if settings.bootstrap_qualifier is None:
        return None
    return DefaultStackSynthesizer(qualifier=settings.bootstrap_qualifier)
