"""Ray and vLLM metrics in Amazon Managed Service for Prometheus: a workspace, the agentless
managed scraper reading the RayService's pods, the alert rules and the alert manager that sends
to the alarm topic.

Why this and not the CloudWatch agent's Prometheus support: that path drops Prometheus
histograms, and time to first token, inter-token latency and NIXL transfer time are all
histograms (CloudWatch user guide, "Prometheus metric type conversion"). docs/observability.md,
"Observability and self-healing", has the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from aws_cdk import Fn, RemovalPolicy, Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns

from app_config import Settings
from app_config.derived_names import (
    prometheus_log_group,
    prometheus_scraper_alias,
    prometheus_workspace_alias,
)
from constructs import Construct
from constructs.common.encrypted_log_group import encrypted_log_group
from monitoring.alert_rules import GROUP_NAME, render_alert_rules
from monitoring.alertmanager import render_alertmanager_definition
from monitoring.scrape_config import render_scrape_config


@dataclass(frozen=True)
class ManagedPrometheusProps:
    settings: Settings
    cluster_arn: str
    # At least two subnets in two zones (the scraper puts an interface in each) that reach the
    # pods; a security group the pods accept traffic from (the cluster security group).
    subnets: list[ec2.ISubnet]
    security_group_id: str
    topic: sns.ITopic
    log_key: kms.IKey
    removal_policy: RemovalPolicy


class ManagedPrometheus(Construct):
    """Publishes ``workspace`` and ``query_url`` (the base of the Prometheus HTTP API)."""

    def __init__(self, scope: Construct, construct_id: str, props: ManagedPrometheusProps) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        region = Stack.of(self).region
        # The ruler's and the alert manager's own errors (a rule that fails to evaluate, a
        # notification SNS refused) land here; without it a broken alerting path is silent.
        self.logs = encrypted_log_group(
            self,
            "WorkspaceLogs",
            key=props.log_key,
            retention_days=settings.observability.log_retention_days,
            removal_policy=props.removal_policy,
            log_group_name=prometheus_log_group(settings.prefix),
        )
        # Encrypted at rest with an AWS owned key. The AMP user guide ("Encryption at rest")
        # notes that workspaces created with a customer managed key cannot use AWS managed
        # collectors for ingestion, and the key cannot be changed after creation; the scraper's
        # RoleConfiguration is for cross-account scraping, not for keys.
        self.workspace = aps.CfnWorkspace(
            self,
            "Workspace",
            alias=prometheus_workspace_alias(settings.prefix),
            workspace_configuration=aps.CfnWorkspace.WorkspaceConfigurationProperty(
                retention_period_in_days=settings.observability.metrics_retention_days
            ),
            alert_manager_definition=render_alertmanager_definition(props.topic.topic_arn, region),
            logging_configuration=aps.CfnWorkspace.LoggingConfigurationProperty(
                log_group_arn=self.logs.log_group_arn  # ends in :*, as AMP requires
            ),
        )
        # The metrics are data: kept on destroy like the logs, unless told otherwise.
        self.workspace.apply_removal_policy(props.removal_policy)
        self.query_url = Fn.join(
            "",
            [
                f"https://aps-workspaces.{region}.amazonaws.com/workspaces/",
                self.workspace.attr_workspace_id,
            ],
        )
        # With EKS access entries, AMP creates the scraper's access entry and its read-only
        # Kubernetes permissions itself (AMP user guide, "Configuring your Amazon EKS cluster").
        self.scraper = aps.CfnScraper(
            self,
            "Scraper",
            alias=prometheus_scraper_alias(settings.prefix),
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=props.cluster_arn,
                    subnet_ids=[subnet.subnet_id for subnet in props.subnets],
                    security_group_ids=[props.security_group_id],
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(
                    workspace_arn=self.workspace.attr_arn
                )
            ),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                configuration_blob=Fn.base64(
                    yaml.safe_dump(render_scrape_config(settings), sort_keys=False)
                )
            ),
        )
        self.rules = aps.CfnRuleGroupsNamespace(
            self,
            "AlertRules",
            name=GROUP_NAME,
            workspace=self.workspace.attr_arn,
            data=yaml.safe_dump(render_alert_rules(settings), sort_keys=False, width=1000),
        )
