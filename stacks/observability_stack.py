"""The observability stack: Prometheus metrics of Ray and vLLM with their alert rules, the
CloudWatch data source over them, node health alarms and the dashboard; changes with thresholds
and panels, never with the cluster or the model."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_sns as sns

from app_config import Settings
from app_config.derived_names import dashboard_name
from constructs import Construct
from constructs.common.log_encryption_key import LogEncryptionKey
from constructs.observability.amp_data_source import AmpDataSource
from constructs.observability.managed_prometheus import ManagedPrometheus, ManagedPrometheusProps
from constructs.observability.node_health_alarms import NodeHealthAlarms
from constructs.observability.serving_dashboard import ServingDashboard
from stacks.common import removal_policy


class ObservabilityStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        topic: sns.ITopic,
        node_group_alarms: dict[str, cloudwatch.IAlarm],
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        vpc = cluster.vpc
        # By ARN: the cluster stack's topic policy already admits CloudWatch, EventBridge and
        # AMP; targets added here must not rewrite it from this stack.
        topic = sns.Topic.from_topic_arn(self, "AlarmTopic", topic.topic_arn)
        log_key = LogEncryptionKey(
            self,
            "LogKey",
            description="Encrypts the observability stack's logs (Lambda, Prometheus workspace)",
            removal_policy=removal_policy(settings),
        ).key
        self.prometheus = ManagedPrometheus(
            self,
            "Prometheus",
            ManagedPrometheusProps(
                settings=settings,
                cluster_arn=cluster.cluster_arn,
                subnets=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets,
                security_group_id=cluster.cluster_security_group_id,
                topic=topic,
                log_key=log_key,
                removal_policy=removal_policy(settings),
            ),
        )
        self.data_source = AmpDataSource(
            self,
            "PrometheusDataSource",
            workspace_arn=self.prometheus.workspace.attr_arn,
            query_url=self.prometheus.query_url,
            log_key=log_key,
            log_retention_days=settings.observability.log_retention_days,
            removal_policy=removal_policy(settings),
        )
        self.node_health = NodeHealthAlarms(self, "NodeHealth", settings=settings, topic=topic)
        self.dashboard = ServingDashboard(
            self,
            "Dashboard",
            settings=settings,
            data_source_function_name=self.data_source.function.function_name,
            alarms=[*node_group_alarms.values(), *self.node_health.alarms],
        )
        CfnOutput(
            self,
            "DashboardUrl",
            value=f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region="
            f"{self.region}#dashboards/dashboard/{dashboard_name(settings.prefix)}",
        )
        CfnOutput(
            self,
            "PrometheusQueryUrl",
            value=self.prometheus.query_url,
            description="Prometheus HTTP API of the workspace (SigV4, service aps)",
        )
