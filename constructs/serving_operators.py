"""The controllers the serving stack relies on: KubeRay, the AWS Load Balancer Controller and,
for gated models, the Secrets Store CSI driver with its AWS provider."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks

from app_config.model import NodePlacement
from app_config.node_labels import ROLE_LABEL, SYSTEM_ROLE
from catalog.helm_charts import KUBERAY_OPERATOR, SECRETS_STORE_CSI_AWS
from constructs import Construct
from constructs.checkov_skips import resources_of_type, skip_checks
from constructs.device_plugins import tolerations
from constructs.helm_release import helm_release
from constructs.nag_acknowledgments import acknowledge

# The newest controller aws-cdk-lib 2.275 ships with its matching IAM policy.
LOAD_BALANCER_CONTROLLER = eks.AlbControllerVersion.V3_2_2
ON_SYSTEM_NODES = {"nodeSelector": {ROLE_LABEL: SYSTEM_ROLE}}

# Wildcards of the controller's published IAM policy (kubernetes-sigs/aws-load-balancer-controller,
# docs/install/iam_policy.json, bundled by aws-cdk-lib per version). Resource "*" covers Describe*
# calls, which support no resource scoping; the ARN patterns cover load balancers, target groups,
# listeners and security groups the controller creates, and the policy's own conditions limit the
# mutating actions to resources tagged elbv2.k8s.aws/cluster.
LOAD_BALANCER_CONTROLLER_POLICY_WILDCARDS = (
    "*",
    "arn:<AWS::Partition>:ec2:*:*:security-group/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:loadbalancer/app/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:loadbalancer/net/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:targetgroup/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener-rule/app/*/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener-rule/net/*/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener/app/*/*/*",
    "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener/net/*/*/*",
)


class ServingOperators(Construct):
    """Publishes ``kuberay``, ``load_balancer_controller`` and ``secrets_store`` (or None).
    ``sync_secrets`` lets the CSI driver mirror mounted secrets into Kubernetes Secrets."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        gpu_placements: list[NodePlacement],
        with_secrets_store: bool,
        sync_secrets: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.kuberay = helm_release(
            self, "KubeRayOperator", cluster=cluster, chart=KUBERAY_OPERATOR, values=ON_SYSTEM_NODES
        )
        self.load_balancer_controller = eks.AlbController(
            self,
            "LoadBalancerController",
            cluster=cluster,
            version=LOAD_BALANCER_CONTROLLER,
            # Region and VPC are passed explicitly by the construct: IMDS is out of reach (hop 1).
            additional_helm_chart_values=ON_SYSTEM_NODES,
        )
        for resource in LOAD_BALANCER_CONTROLLER_POLICY_WILDCARDS:
            acknowledge(
                self.load_balancer_controller,
                f"AwsSolutions-IAM5[Resource::{resource}]",
                "The AWS Load Balancer Controller's own published IAM policy: it must manage load "
                "balancers, target groups and listeners whose names it generates; mutations are "
                "conditioned on its elbv2.k8s.aws/cluster tag, and IRSA limits the role to "
                "kube-system:aws-load-balancer-controller.",
            )
        for policy in resources_of_type(self.load_balancer_controller, "AWS::IAM::Policy"):
            skip_checks(policy, {
                "CKV_AWS_111": "The AWS Load Balancer Controller's published policy; its write "
                "actions are conditioned on the controller's own resource tags where AWS allows "
                "it, and the role is trusted only by the controller's service account.",
            })  # fmt: skip
        self.secrets_store = None
        if with_secrets_store:
            # The driver's and the provider's DaemonSets must run where the Ray pods mount the
            # secret: on the GPU nodes, through their taints.
            gpu_tolerations = tolerations(gpu_placements)
            driver: dict = {"linux": {"tolerations": gpu_tolerations}}
            if sync_secrets:
                # KubeRay reads the GCS store's password only from a Kubernetes Secret.
                driver["syncSecret"] = {"enabled": True}
            self.secrets_store = helm_release(
                self,
                "SecretsStoreCsiAws",
                cluster=cluster,
                chart=SECRETS_STORE_CSI_AWS,
                values={"tolerations": gpu_tolerations, "secrets-store-csi-driver": driver},
            )
