"""GPU and EFA health signals to the alarm topic: EFA connection errors and NotReady nodes from
Container Insights, and AWS Health's EC2 events (hardware degradation, retirement, maintenance).

The node monitoring agent's GPU findings (XID errors, NVLink, DCGM) become node conditions that
node auto repair acts on; what reaches operators is the repair itself, which shows as a node
group below its desired size (NodeGroupCapacityAlarm in the cluster stack).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_events as events
from aws_cdk import aws_sns as sns

from app_config import Settings
from app_config.derived_names import (
    efa_connection_errors_alarm,
    health_events_undelivered_alarm,
    nodes_not_ready_alarm,
)
from catalog.metrics import (
    CLUSTER_FAILED_NODES,
    NODE_EFA_IMPAIRED_REMOTE,
    NODE_EFA_UNRESPONSIVE_REMOTE,
    RULE_FAILED_INVOCATIONS,
)
from constructs import Construct
from constructs.common.catalog_metric import catalog_metric

WINDOW = Duration.minutes(5)


class NodeHealthAlarms(Construct):
    """Publishes ``alarms`` (the CloudWatch alarms, for the dashboard's status widget)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, topic: sns.ITopic
    ) -> None:
        super().__init__(scope, construct_id)
        cluster = {"ClusterName": settings.cluster_name}
        sums = {"statistic": "Sum", "period": WINDOW}
        efa_errors = cloudwatch.MathExpression(
            expression="unresponsive + impaired",
            using_metrics={
                "unresponsive": catalog_metric(NODE_EFA_UNRESPONSIVE_REMOTE, cluster, **sums),
                "impaired": catalog_metric(NODE_EFA_IMPAIRED_REMOTE, cluster, **sums),
            },
            period=WINDOW,
            label="EFA remote connection errors",
        )
        efa_name = efa_connection_errors_alarm(settings.prefix)
        efa_alarm = efa_errors.create_alarm(
            self,
            "EfaErrors",
            alarm_name=efa_name,
            alarm_description="EFA reported unresponsive or impaired remote connections. No "
            "data counts as no errors (no GPU node reporting); a Container Insights agent that "
            "stopped reporting shows in the nodes-not-ready alarm. Measure the path with "
            "`pdctl efa-check` (also for a replica that dies at start with "
            "`nixlNotFoundError: NIXL_ERR_NOT_FOUND`, or a worker pod whose `efa-devices` init "
            f"container fails); see docs/observability.md, '{efa_name}'.",
            threshold=settings.observability.alarms.efa_error_events_threshold,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        not_ready_name = nodes_not_ready_alarm(settings.prefix)
        failed_nodes = catalog_metric(
            CLUSTER_FAILED_NODES, cluster, statistic="Maximum", period=WINDOW
        ).create_alarm(
            self,
            "NodesNotReady",
            alarm_name=not_ready_name,
            alarm_description="A node of the cluster has been NotReady for 10 minutes, or "
            "Container Insights has reported nothing for 10 minutes (the system nodes always "
            "report: silence means the monitoring path is broken). See docs/observability.md, "
            f"'{not_ready_name}'.",
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=2,
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        )
        delivery_name = health_events_undelivered_alarm(settings.prefix)
        health_events = events.Rule(
            self,
            "Ec2HealthEvents",
            description="AWS Health events about EC2 instances of this account and region "
            "(GPU hardware degradation, instance retirement, scheduled maintenance)",
            event_pattern=events.EventPattern(
                source=["aws.health"],
                detail_type=["AWS Health Event"],
                detail={"service": ["EC2"]},
            ),
        )
        # A plain target: the topic's policy in the cluster stack already admits EventBridge;
        # the SnsTopic target class would rewrite that policy from this stack.
        health_events.node.default_child.add_property_override(
            "Targets", [{"Arn": topic.topic_arn, "Id": "AlarmTopic"}]
        )
        undelivered = catalog_metric(
            RULE_FAILED_INVOCATIONS,
            {"RuleName": health_events.rule_name},
            statistic="Sum",
            period=WINDOW,
        ).create_alarm(
            self,
            "HealthEventsUndelivered",
            alarm_name=delivery_name,
            alarm_description="EventBridge could not deliver an AWS Health event to the alarm "
            "topic (the topic's policy or its key refuses EventBridge). Check the topic's key "
            f"policy. See docs/observability.md, '{delivery_name}'.",
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.alarms = [efa_alarm, failed_nodes, undelivered]
        for alarm in self.alarms:
            alarm.add_alarm_action(actions.SnsAction(topic))
            alarm.add_ok_action(actions.SnsAction(topic))
