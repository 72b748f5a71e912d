"""The encrypted SNS topic every alarm and health event of the deployment notifies."""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions

from constructs import Construct
from constructs.rotating_key import rotating_key

# Who publishes: CloudWatch alarms, EventBridge rules (health events) and the Amazon Managed
# Service for Prometheus alert manager. Each needs the key to encrypt what it publishes
# (SNS developer guide, "Configure AWS KMS permissions for AWS services").
PUBLISHERS = ("cloudwatch.amazonaws.com", "events.amazonaws.com", "aps.amazonaws.com")
PROMETHEUS = "aps.amazonaws.com"


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
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                principals=[iam.ServicePrincipal(service) for service in PUBLISHERS],
                resources=["*"],  # in a key policy, "*" means this key
                conditions={"StringEquals": {"aws:SourceAccount": account}},
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
