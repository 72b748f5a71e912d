"""A log group with our key, our retention and our removal policy: the only kind this app makes."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs

from constructs import Construct


def encrypted_log_group(
    scope: Construct,
    construct_id: str,
    *,
    key: kms.IKey,
    retention_days: int,
    removal_policy: RemovalPolicy,
    log_group_name: str | None = None,
) -> logs.LogGroup:
    log_group = logs.LogGroup(
        scope,
        construct_id,
        log_group_name=log_group_name,
        encryption_key=key,
        removal_policy=removal_policy,
    )
    # RetentionDays is a jsii enum of names; the validated number goes straight to the L1.
    log_group.node.default_child.retention_in_days = retention_days
    return log_group


def encrypt_log_groups_under(scope: Construct, key: kms.IKey) -> None:
    """Put ``key`` on log groups that aws-cdk-lib creates inside its own constructs (custom
    resource providers) and leaves on the default key."""
    for child in scope.node.find_all():
        if isinstance(child, logs.CfnLogGroup):
            child.add_property_override("KmsKeyId", key.key_arn)
