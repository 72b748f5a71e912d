"""The CloudWatch custom data source over the Prometheus workspace (functions/amp_data_source),
with a role that can query that one workspace and write its own log group, nothing else."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, RemovalPolicy, Stack, Tags
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_

from constructs import Construct
from constructs.common.checkov_skips import skip_checks
from constructs.common.encrypted_log_group import encrypted_log_group

CODE = Path(__file__).resolve().parents[2] / "functions" / "amp_data_source"
# The principal CloudWatch invokes data sources as, for dashboards and alarms alike
# (CloudWatch user guide, "Create a custom connector to a data source", step 2).
DATA_SOURCE_PRINCIPAL = "lambda.datasource.cloudwatch.amazonaws.com"
# Lists the function among the console's metric data sources (same page, step 3).
DATA_SOURCE_TAG = ("cloudwatch:datasource", "custom")


class AmpDataSource(Construct):
    """Publishes ``function``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workspace_arn: str,
        query_url: str,
        log_key: kms.IKey,
        log_retention_days: int,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        log_group = encrypted_log_group(
            self,
            "Logs",
            key=log_key,
            retention_days=log_retention_days,
            removal_policy=removal_policy,
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="CloudWatch data source: PromQL queries on the serving workspace",
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["aps:QueryMetrics"], resources=[workspace_arn])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            )
        )
        self.function = lambda_.Function(
            self,
            "Function",
            description="CloudWatch data source: PromQL range queries on the serving workspace",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="handler.handler",
            code=lambda_.Code.from_asset(str(CODE), exclude=["__pycache__", "__init__.py"]),
            role=role,
            timeout=Duration.seconds(10),
            memory_size=256,
            log_group=log_group,
            environment={"WORKSPACE_URL": query_url},
        )
        Tags.of(self.function).add(*DATA_SOURCE_TAG)
        self.function.add_permission(
            "CloudWatchDataSource",
            principal=iam.ServicePrincipal(DATA_SOURCE_PRINCIPAL),
            source_account=Stack.of(self).account,
        )
        skip_checks(self.function.node.default_child, {
            "CKV_AWS_115": "One dashboard load runs two dozen queries at once; a reservation "
            "would throttle the dashboard or, in accounts with a low concurrency quota, fail the "
            "deployment. CloudWatch's own call rate bounds the invocations.",
            "CKV_AWS_116": "CloudWatch invokes the data source synchronously and shows its error "
            "on the widget or alarm; a dead-letter queue would hold nothing anyone reads.",
            "CKV_AWS_117": "Queries the workspace's regional AMP endpoint, which is public and "
            "SigV4-authenticated; the function touches nothing inside the VPC.",
            "CKV_AWS_173": "The only environment variable is the workspace's query URL, which is "
            "not a secret; Lambda encrypts it at rest with its service key.",
        })  # fmt: skip
