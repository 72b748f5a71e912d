"""The Cluster Autoscaler: GPU nodes for Ray worker pods that wait for one, and back when empty.

It discovers this deployment's managed node groups, and no other node group of the cluster: by
the tags EKS puts on their Auto Scaling groups (k8s.io/cluster-autoscaler/enabled and
.../<cluster>; EKS user guide, "Managed node groups") and the deployment's own tag, which the app
puts on the groups it creates (app_config/autoscaler_discovery.py). It builds an empty GPU
group's node from the group's own tags (app_config/node_template.py) and never removes a node
that holds a Ray worker: those pods carry cluster-autoscaler.kubernetes.io/safe-to-evict=false,
and Ray removes its idle workers itself.

IAM is the project's documented policy (kubernetes/autoscaler cluster-autoscaler/cloudprovider/
aws/README.md, "Full Cluster Autoscaler Features Policy", at cluster-autoscaler-1.35.2) with the
two writes restricted, as that README asks, by tag: to groups carrying this cluster's
eks:cluster-name (EKS's) and this deployment's tag (the app's), so that even a wider discovery
could not resize a node group the app did not create.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from app_config import Settings
from app_config.autoscaler_discovery import CLUSTER_NAME_TAG, DEPLOYMENT_TAG, discovery_tags
from app_config.node_labels import ROLE_LABEL, SYSTEM_ROLE
from catalog.eks_versions import RELEASES
from catalog.helm_charts import CLUSTER_AUTOSCALER
from constructs import Construct
from constructs.common.helm_release import helm_release
from constructs.common.irsa import ServiceAccountRole
from constructs.common.nag_acknowledgments import account_arn, acknowledge

SERVICE_ACCOUNT = "cluster-autoscaler"
DEPLOYMENT_NAME = "cluster-autoscaler"
# Read-only calls that support no resource scoping.
READS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
)
WRITES = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")
NODE_INFO_CACHE_MINUTES = 10


def autoscaler_arguments(settings: Settings) -> dict[str, str | bool]:
    """The chart's extraArgs (each becomes --key=value)."""
    timing = settings.cluster.node_autoscaler
    return {
        # The group that leaves the least CPU and memory idle; a Ray worker fits only its own
        # side's group anyway (node selector and taints).
        "expander": "least-waste",
        # Prefill and decode groups may look alike (same type); they must never be balanced.
        "balance-similar-node-groups": False,
        # The default, written down. It does not keep a Ray worker's node: CA counts neither
        # a memory-backed emptyDir (the workers' /dev/shm) nor a persistent volume claim (the
        # model cache) as local storage (utils/drain/drain.go isLocalVolume, 1.35); the
        # workers' safe-to-evict=false annotation is what keeps their nodes until Ray removes
        # the pod.
        "skip-nodes-with-local-storage": True,
        # A node's snapshot becomes its group's template once it has been Ready for a minute,
        # and stays in CA's cache after the group empties; by default for ten years
        # (processors/nodeinfosprovider/mixed_nodeinfos_processor.go, 1.35). A GPU node seen
        # before its EFA device plugin advertised the devices would then leave an empty group
        # with a template no worker fits, until CA restarts. Expired, the template is built
        # again from the node group's tags (app_config/node_template.py), which always fit.
        "node-info-cache-expire-time": f"{NODE_INFO_CACHE_MINUTES}m",
        "scale-down-unneeded-time": f"{timing.scale_down_unneeded_minutes}m",
        "max-node-provision-time": f"{timing.max_node_provision_minutes}m",
    }


class ClusterAutoscaler(Construct):
    """Publishes ``role`` (its IRSA role) and ``release`` (the Helm chart)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        cluster_name = settings.cluster_name
        identity = ServiceAccountRole(
            self,
            "Role",
            cluster=cluster,
            namespace=CLUSTER_AUTOSCALER.namespace,
            service_account=SERVICE_ACCOUNT,
            description="Cluster Autoscaler: resizes this cluster's node groups",
        )
        self.role = identity.role
        self.role.add_to_policy(iam.PolicyStatement(actions=list(READS), resources=["*"]))
        nodegroups = account_arn(stack, "eks", f"nodegroup/{cluster_name}/*/*")
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[nodegroups.arn])
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=list(WRITES),
                resources=["*"],
                conditions={
                    "StringEquals": {
                        f"aws:ResourceTag/{CLUSTER_NAME_TAG}": cluster_name,
                        f"aws:ResourceTag/{DEPLOYMENT_TAG}": settings.prefix,
                    }
                },
            )
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5[Resource::*]",
            "Auto Scaling and EC2 Describe calls support no resource scoping; the two writes "
            f"(SetDesiredCapacity, TerminateInstanceInAutoScalingGroup) apply only to groups "
            f"tagged {CLUSTER_NAME_TAG}={cluster_name} and {DEPLOYMENT_TAG}={settings.prefix}, "
            "i.e. the managed node groups this deployment created.",
        )
        acknowledge(
            self.role,
            nodegroups.finding,
            "eks:DescribeNodegroup on this cluster's node groups only; their names are EKS's.",
        )
        kubernetes = RELEASES[settings.cluster.kubernetes_version]
        self.release = helm_release(
            self,
            "Chart",
            cluster=cluster,
            chart=CLUSTER_AUTOSCALER,
            values={
                # One name for the Deployment, its logs and the runbook's command.
                "fullnameOverride": DEPLOYMENT_NAME,
                # The autoscaler release of the cluster's minor; the chart's default image is
                # its appVersion's, which may be an older minor.
                "image": {"tag": kubernetes.cluster_autoscaler_image_tag},
                "cloudProvider": "aws",
                "awsRegion": stack.region,
                # The chart's default tags plus the deployment's: one ANDed filter.
                "autoDiscovery": {
                    "clusterName": cluster_name,
                    "tags": discovery_tags(cluster_name, settings.prefix),
                },
                "rbac": {
                    "serviceAccount": {
                        "create": True,
                        "name": SERVICE_ACCOUNT,
                        "annotations": {"eks.amazonaws.com/role-arn": self.role.role_arn},
                    }
                },
                "nodeSelector": {ROLE_LABEL: SYSTEM_ROLE},
                "extraArgs": autoscaler_arguments(settings),
            },
        )
