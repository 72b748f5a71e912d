"""The one kind of KMS key this app makes: rotated yearly, kept or destroyed with the data it
protects (``retain_data_on_destroy``)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kms as kms

from constructs import Construct


def rotating_key(
    scope: Construct, construct_id: str, *, description: str, removal_policy: RemovalPolicy
) -> kms.Key:
    return kms.Key(
        scope,
        construct_id,
        description=description,
        enable_key_rotation=True,
        removal_policy=removal_policy,
    )
