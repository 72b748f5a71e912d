"""An alarm for a managed node group that has fewer nodes in service than it wants: capacity
that did not come (no reservation, no quota, no instances in the zone) or a node being repaired.

EKS names the node group's Auto Scaling group itself and CloudFormation does not return it, so a
custom resource reads it from DescribeNodegroup on every change to the node group
(constructs/common/auto_scaling_group.py). EKS enables
the group's metrics on managed node groups (EKS user guide, "View Auto Scaling group metrics").
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_sns as sns

from catalog.metrics import GROUP_DESIRED, GROUP_IN_SERVICE
from constructs import Construct
from constructs.common.auto_scaling_group import ASG_NAME_PATH, auto_scaling_group_lookup
from constructs.common.catalog_metric import catalog_metric

PERIOD = Duration.minutes(1)


class NodeGroupCapacityAlarm(Construct):
    """Publishes ``alarm``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        alarm_name: str,
        nodegroup: eks.Nodegroup,
        role: str,
        minutes: int,
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        lookup = auto_scaling_group_lookup(
            self, "AutoScalingGroupName", cluster_name=cluster_name, nodegroup=nodegroup
        )
        group = {"AutoScalingGroupName": lookup.get_response_field(ASG_NAME_PATH)}
        desired = catalog_metric(
            GROUP_DESIRED, group, statistic="Maximum", period=PERIOD, label=f"{role} desired"
        )
        in_service = catalog_metric(
            GROUP_IN_SERVICE, group, statistic="Minimum", period=PERIOD, label=f"{role} in service"
        )
        shortfall = cloudwatch.MathExpression(
            expression="desired - inService",
            using_metrics={"desired": desired, "inService": in_service},
            period=PERIOD,
            label=f"{role} nodes missing",
        )
        self.alarm = shortfall.create_alarm(
            self,
            "Alarm",
            alarm_name=alarm_name,
            alarm_description=(
                f"The {role} GPU node group has had fewer nodes in service than desired for "
                f"{minutes} minutes. See docs/observability.md, '{alarm_name}'."
            ),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=minutes,
            treat_missing_data=cloudwatch.TreatMissingData.MISSING,
        )
        self.alarm.add_alarm_action(actions.SnsAction(topic))
        self.alarm.add_ok_action(actions.SnsAction(topic))
