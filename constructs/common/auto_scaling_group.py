"""A managed node group's Auto Scaling group, which EKS names and CloudFormation does not return:
read from DescribeNodegroup on every change to the node group, and tagged as this deployment's.

The tag (app_config/autoscaler_discovery.py) is what the app's Cluster Autoscaler discovers and
may resize, so that it leaves every node group the app did not create alone; a managed node
group's own tags never reach its Auto Scaling group (aws/containers-roadmap#608), so a custom
resource puts it there (Auto Scaling API reference, CreateOrUpdateTags). EKS keeps one Auto
Scaling group for a node group's life, and a replaced node group (a new name) is tagged anew.
Deleting the node group deletes its group and the tag; nothing else is left to undo.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr

from app_config.autoscaler_discovery import CLUSTER_NAME_TAG, DEPLOYMENT_TAG
from constructs import Construct
from constructs.common.checkov_skips import AWS_CUSTOM_RESOURCE_PROVIDER_ID
from constructs.common.encrypted_log_group import encrypt_log_groups_under
from constructs.common.log_encryption_key import LogEncryptionKey
from constructs.common.nag_acknowledgments import acknowledge, aws_managed_policy_finding

ASG_NAME_PATH = "nodegroup.resources.autoScalingGroups.0.name"
# EKS's own tag on a managed node group's Auto Scaling group (the Cluster Autoscaler reads it to
# find the node group: cloudprovider/aws/README.md, 1.35.2).
NODEGROUP_NAME_TAG = "eks:nodegroup-name"


def auto_scaling_group_lookup(
    scope: Construct, construct_id: str, *, cluster_name: str, nodegroup: eks.Nodegroup
) -> cr.AwsCustomResource:
    """DescribeNodegroup at deploy time; ``get_response_field(ASG_NAME_PATH)`` is the name."""
    return cr.AwsCustomResource(
        scope,
        construct_id,
        on_update=cr.AwsSdkCall(
            service="EKS",
            action="DescribeNodegroup",
            parameters={"clusterName": cluster_name, "nodegroupName": nodegroup.nodegroup_name},
            physical_resource_id=cr.PhysicalResourceId.of(nodegroup.nodegroup_name),
            output_paths=[ASG_NAME_PATH],
        ),
        policy=cr.AwsCustomResourcePolicy.from_sdk_calls(resources=[nodegroup.nodegroup_arn]),
        install_latest_aws_sdk=False,
    )


class DeploymentTag(Construct):
    """Tags one node group's Auto Scaling group with ``DEPLOYMENT_TAG`` = ``prefix``. Publishes
    ``tag`` (the custom resource), which the autoscaler's discovery depends on at run time only."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        nodegroup: eks.Nodegroup,
        prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        lookup = auto_scaling_group_lookup(
            self, "AutoScalingGroupName", cluster_name=cluster_name, nodegroup=nodegroup
        )
        self.tag = cr.AwsCustomResource(
            self,
            "Tag",
            on_update=cr.AwsSdkCall(
                service="AutoScaling",
                action="CreateOrUpdateTags",
                parameters={
                    "Tags": [
                        {
                            "ResourceId": lookup.get_response_field(ASG_NAME_PATH),
                            "ResourceType": "auto-scaling-group",
                            "Key": DEPLOYMENT_TAG,
                            "Value": prefix,
                        }
                    ]
                },
                physical_resource_id=cr.PhysicalResourceId.of(nodegroup.nodegroup_name),
            ),
            # Only this tag, only on this node group's Auto Scaling group: its ARN holds a UUID
            # that nothing returns, so the group is named by EKS's own tags instead.
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [
                    iam.PolicyStatement(
                        actions=["autoscaling:CreateOrUpdateTags"],
                        resources=["*"],
                        conditions={
                            "StringEquals": {
                                f"aws:ResourceTag/{CLUSTER_NAME_TAG}": cluster_name,
                                f"aws:ResourceTag/{NODEGROUP_NAME_TAG}": nodegroup.nodegroup_name,
                            },
                            "ForAllValues:StringEquals": {"aws:TagKeys": [DEPLOYMENT_TAG]},
                        },
                    )
                ]
            ),
            install_latest_aws_sdk=False,
        )
        acknowledge(
            self.tag,
            "AwsSolutions-IAM5[Resource::*]",
            "CreateOrUpdateTags of the one tag the Cluster Autoscaler discovers this "
            f"deployment's node groups by ({DEPLOYMENT_TAG}), on the Auto Scaling group that "
            f"EKS tags {NODEGROUP_NAME_TAG} with this node group's name only; the group's ARN "
            "carries a UUID that no API returns to CloudFormation.",
        )


def harden_lookup_provider(
    stack: Stack, *, removal_policy: RemovalPolicy, key_description: str
) -> None:
    """The stack's one AwsCustomResource handler (aws-cdk-lib's singleton, which every lookup and
    tag above shares): its logs get a key of the stack's, its managed policy an acknowledgment.
    Call once, after the last custom resource of the stack."""
    lookups = stack.node.find_child(AWS_CUSTOM_RESOURCE_PROVIDER_ID)
    log_key = LogEncryptionKey(
        stack,
        "LookupLogKey",
        description=key_description,
        removal_policy=removal_policy,
    ).key
    encrypt_log_groups_under(lookups, log_key)
    acknowledge(
        lookups,
        aws_managed_policy_finding("service-role/AWSLambdaBasicExecutionRole"),
        "aws-cdk-lib's AwsCustomResource handler (the node groups' Auto Scaling group names "
        "and their deployment tag) writes its own logs with the AWS managed Lambda execution "
        "policy; it runs only while CloudFormation updates this stack.",
    )
