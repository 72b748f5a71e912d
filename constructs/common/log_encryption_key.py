"""A KMS key that CloudWatch Logs may use for this account's log groups, and nothing else."""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam

from constructs import Construct
from constructs.common.rotating_key import rotating_key


class LogEncryptionKey(Construct):
    """Publishes ``key``. Rotation on; the key outlives `cdk destroy` unless told otherwise,
    because log groups kept by the same policy stay unreadable without it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        description: str,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = rotating_key(self, "Key", description=description, removal_policy=removal_policy)
        stack = Stack.of(self)
        # CloudWatch Logs encrypts through the key on the log group's behalf (CloudWatch Logs user
        # guide, "Encrypt log data in CloudWatch Logs using AWS KMS"); the encryption context
        # condition limits that to log groups of this account and region.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=[
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                resources=["*"],  # in a key policy, "*" means this key
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                            service="logs",
                            resource="log-group",
                            resource_name="*",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    }
                },
            )
        )
