"""The EKS add-ons that watch the nodes: Container Insights with enhanced observability (GPU and
EFA metrics, container logs) and the node monitoring agent that node auto repair acts on."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from app_config.model import NodePlacement
from app_config.observability import Observability
from catalog.container_insights import log_group_kinds, log_group_name
from catalog.eks_versions import CLOUDWATCH_OBSERVABILITY, NODE_MONITORING_AGENT
from constructs import Construct
from constructs.cluster.managed_addon import managed_addon
from constructs.common.encrypted_log_group import encrypted_log_group
from constructs.common.irsa import ServiceAccountRole
from constructs.common.nag_acknowledgments import acknowledge, aws_managed_policy_finding
from constructs.serving.device_plugins import tolerations

# The add-on's agent and Fluent Bit run as this service account (aws-observability/helm-charts,
# charts/amazon-cloudwatch-observability/templates/_helpers.tpl).
CLOUDWATCH_AGENT_NAMESPACE = "amazon-cloudwatch"
CLOUDWATCH_AGENT_SERVICE_ACCOUNT = "cloudwatch-agent"
# What the CloudWatch user guide attaches for this add-on ("Install the CloudWatch agent with the
# Amazon CloudWatch Observability EKS add-on").
CLOUDWATCH_AGENT_POLICY = "CloudWatchAgentServerPolicy"


def cloudwatch_observability_configuration(settings: Observability) -> dict:
    """Enhanced Container Insights with accelerated compute metrics: NVIDIA GPU (dcgm-exporter,
    which the chart schedules on p4d/p5/p6 types) and EFA. The agent's DaemonSets tolerate every
    taint by default, so they reach the GPU nodes without help.

    This is the EMF-based mode CloudWatch now calls "Classic" (kept, not developed further); its
    OpenTelemetry successor (add-on 8.0+, PromQL) was not yet listed for Kubernetes 1.35 when
    this was pinned. The metric names in catalog/metrics.py are the Classic ones."""
    return {
        "agent": {
            "config": {
                "logs": {
                    "metrics_collected": {
                        "kubernetes": {
                            "enhanced_container_insights": True,
                            "accelerated_compute_metrics": True,
                        }
                    }
                }
            }
        },
        "containerLogs": {"enabled": settings.container_logs},
    }


def node_monitoring_configuration(gpu_placements: list[NodePlacement]) -> dict:
    """The agent tolerates every taint by default; its DCGM host engine tolerates none, so it
    would never run on the GPU nodes, where its GPU health checks matter."""
    return {"dcgmAgent": {"tolerations": tolerations(gpu_placements)}}


@dataclass(frozen=True)
class ObservabilityAddonsProps:
    cluster: eks.ICluster
    cluster_name: str
    settings: Observability
    gpu_placements: list[NodePlacement]
    log_key: kms.IKey
    removal_policy: RemovalPolicy


class ObservabilityAddons(Construct):
    """Publishes ``agent_role``, ``addons`` and ``log_groups`` (by kind)."""

    def __init__(
        self, scope: Construct, construct_id: str, props: ObservabilityAddonsProps
    ) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        agent_role = ServiceAccountRole(
            self,
            "CloudWatchAgentRole",
            cluster=props.cluster,
            namespace=CLOUDWATCH_AGENT_NAMESPACE,
            service_account=CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
            description="Container Insights agent and Fluent Bit: metrics and logs",
        ).role
        agent_role.add_managed_policy(
            iam.ManagedPolicy.from_aws_managed_policy_name(CLOUDWATCH_AGENT_POLICY)
        )
        acknowledge(
            agent_role,
            aws_managed_policy_finding(CLOUDWATCH_AGENT_POLICY),
            "The policy AWS documents for the CloudWatch Observability add-on; AWS keeps it in "
            "step with what the agent calls. IRSA limits the role to "
            "amazon-cloudwatch:cloudwatch-agent.",
        )
        self.agent_role = agent_role
        # Created here, so that retention and encryption are ours and the groups outlive the
        # cluster on `cdk destroy`; the agent writes to existing groups and creates none.
        kinds = log_group_kinds(settings.container_logs)
        self.log_groups = {
            kind: encrypted_log_group(
                self,
                f"{kind.capitalize()}Logs",
                log_group_name=log_group_name(props.cluster_name, kind),
                key=props.log_key,
                retention_days=settings.log_retention_days,
                removal_policy=props.removal_policy,
            )
            for kind in kinds
        }
        cloudwatch = managed_addon(
            self,
            props.cluster,
            CLOUDWATCH_OBSERVABILITY,
            configuration=cloudwatch_observability_configuration(settings),
            service_account_role=agent_role,
        )
        for log_group in self.log_groups.values():
            cloudwatch.node.add_dependency(log_group)
        node_monitoring = managed_addon(
            self,
            props.cluster,
            NODE_MONITORING_AGENT,
            configuration=node_monitoring_configuration(props.gpu_placements),
        )
        self.addons = (cloudwatch, node_monitoring)
