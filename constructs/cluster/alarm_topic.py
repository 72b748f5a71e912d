"""The encrypted SNS topic every alarm and health event of the deployment notifies."""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions

from constructs import Construct
from constructs.common.rotating_key import rotating_key

# Who publishes: CloudWatch alarms, EventBridge rules (health events) and the Amazon Managed
# Service for Prometheus alert manager. Each needs the key to encrypt what it publishes
# (SNS developer guide, "Configure AWS KMS permissions for AWS services").
CLOUDWATCH = "cloudwatch.amazonaws.com"
EVENTBRIDGE = "events.amazonaws.com"
PROMETHEUS = "aps.amazonaws.com"
PUBLISHERS = (CLOUDWATCH, EVENTBRIDGE, PROMETHEUS)
# Publishers whose key-policy statement carries no source condition. EventBridge: the SNS
# developer guide ("Enable compatibility between event sources from AWS services and encrypted
# topics") says aws:SourceAccount, aws:SourceArn and aws:SourceOrgID in a KMS key policy are not
# supported for EventBridge to encrypted topics; with one, every delivery fails silently. AMP:
# its guide ("Permission to send alert messages to your Amazon SNS topic") asks the key for
# kms:GenerateDataKey* and kms:Decrypt and documents its source conditions on the topic policy
# only. Both stay scoped by the topic policy below, which keeps the source conditions, and by
# the key serving this one topic.
UNCONDITIONED_KEY_USERS = (EVENTBRIDGE, PROMETHEUS)


class AlarmTopic(Construct):
    """Publishes ``topic`` and ``key``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        emails: list[str],
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        account = Stack.of(self).account
        self.key = rotating_key(
            self,
            "Key",
            description="Encrypts the alarm topic's messages at rest",
            removal_policy=removal_policy,
        )
        key_actions = ["kms:GenerateDataKey*", "kms:Decrypt"]
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=key_actions,
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                resources=["*"],  # in a key policy, "*" means this key
                conditions={"StringEquals": {"aws:SourceAccount": account}},
            )
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=key_actions,
                principals=[iam.ServicePrincipal(s) for s in UNCONDITIONED_KEY_USERS],
                resources=["*"],
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="LLM serving alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish"],
                principals=[
                    iam.ServicePrincipal(service) for service in PUBLISHERS if service != PROMETHEUS
                ],
                resources=[self.topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": account}},
            )
        )
        # The alert manager also reads the topic's attributes, and only this account's
        # workspaces may use it (AMP user guide, "Permission to publish to the SNS topic").
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish", "sns:GetTopicAttributes"],
                principals=[iam.ServicePrincipal(PROMETHEUS)],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": account},
                    "ArnLike": {
                        "aws:SourceArn": Stack.of(self).format_arn(
                            service="aps", resource="workspace", resource_name="*"
                        )
                    },
                },
            )
        )
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
