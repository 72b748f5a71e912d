"""The controllers the serving stack relies on: KubeRay, the AWS Load Balancer Controller and,
for gated models, the Secrets Store CSI driver with its AWS provider."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from app_config.model import NodePlacement
from app_config.node_labels import ROLE_LABEL, SYSTEM_ROLE
from catalog.helm_charts import KUBERAY_OPERATOR, SECRETS_STORE_CSI_AWS
from constructs import Construct
from constructs.common.checkov_skips import resources_of_type
from constructs.common.helm_release import helm_release
from constructs.common.nag_acknowledgments import acknowledge
from constructs.serving.device_plugins import tolerations
from serving_manifests.names import SERVE_PORT

# The newest controller aws-cdk-lib 2.275 ships with its matching IAM policy.
LOAD_BALANCER_CONTROLLER = eks.AlbControllerVersion.V3_2_2
ON_SYSTEM_NODES = {"nodeSelector": {ROLE_LABEL: SYSTEM_ROLE}}


def kuberay_values(serving_namespace: str) -> dict:
    """KubeRay for the serving namespace only (chart kuberay-operator 1.7.0, values.yaml and
    templates/): with singleNamespaceInstall the chart renders no ClusterRole or
    ClusterRoleBinding (role.yaml, rolebinding.yaml) but a Role and RoleBinding in each
    watchNamespace (multiple_namespaces_role*.yaml, crNamespacedRbacEnable defaults to true),
    and passes --watch-namespace to the operator (deployment.yaml), whose informers then see
    that namespace alone. Its Secrets, Pods, Services, Jobs and RBAC rights stop there."""
    return {
        **ON_SYSTEM_NODES,
        "singleNamespaceInstall": True,
        "watchNamespace": [serving_namespace],
    }


# The controller here only binds one target group (TargetGroupBinding): its Service and Ingress
# controllers and its mutating webhook for LoadBalancer Services stay off (chart v3.2.2 values).
TARGET_GROUP_BINDING_ONLY = {
    **ON_SYSTEM_NODES,
    "enableServiceMutatorWebhook": False,
    "createIngressClassResource": False,
    "controllerConfig": {"featureGates": {"EnableServiceController": False}},
}
# What a TargetGroupBinding with IP targets calls, traced in the controller at v3.2.2 (upstream
# docs/deploy/installation.md, "You only want the LBC to add and remove IPs to already existing
# target groups"): Describe* support no resource scoping; the writes are scoped to the one target
# group. The EC2 reads serve the binding webhook and pod ENI lookups.
TARGET_GROUP_BINDING_READS = (
    "elasticloadbalancing:DescribeTargetGroups",  # webhooks: target type, VPC, protocol
    "elasticloadbalancing:DescribeTargetHealth",  # targets_manager: what is registered
    "ec2:DescribeVpcs",  # vpc_info_provider: the target's VPC
    "ec2:DescribeSecurityGroups",  # security_group_manager: rules to keep or revoke
    "ec2:DescribeInstances",  # node ENIs: which security group holds a pod's IP
    "ec2:DescribeNetworkInterfaces",  # pod ENIs
)


class ServingOperators(Construct):
    """Publishes ``kuberay``, ``load_balancer_controller`` and ``secrets_store`` (or None).
    ``sync_secrets`` lets the CSI driver mirror mounted secrets into Kubernetes Secrets."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        gpu_placements: list[NodePlacement],
        serving_namespace: str,
        with_secrets_store: bool,
        sync_secrets: bool = False,
        install_kuberay: bool = True,
        install_load_balancer_controller: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        # Its Role and RoleBinding land in the serving namespace, which must exist first: the
        # caller makes this release depend on the namespace. None where an existing cluster's
        # owner runs it (cluster.existing.addons).
        self.kuberay = (
            helm_release(
                self,
                "KubeRayOperator",
                cluster=cluster,
                chart=KUBERAY_OPERATOR,
                values=kuberay_values(serving_namespace),
            )
            if install_kuberay
            else None
        )
        self.cluster = cluster
        self.load_balancer_controller = None
        self._controller_account: eks.ServiceAccount | None = None
        if install_load_balancer_controller and not isinstance(cluster, eks.Cluster):
            self.load_balancer_controller = self._on_imported_cluster(cluster)
        elif install_load_balancer_controller:
            self.load_balancer_controller = eks.AlbController(
                self,
                "LoadBalancerController",
                cluster=cluster,
                version=LOAD_BALANCER_CONTROLLER,
                # Region and VPC are passed explicitly by the construct: IMDS is out of reach
                # (hop 1).
                additional_helm_chart_values=TARGET_GROUP_BINDING_ONLY,
            )
            acknowledge(
                self.load_balancer_controller,
                "AwsSolutions-IAM5[Resource::*]",
                "Only the controller's Describe calls (target groups, target health, VPCs, "
                "security groups, instances, network interfaces), which AWS cannot scope to a "
                "resource; its only writes (register and deregister targets) are scoped to the "
                "one target group.",
            )
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

    def bind_only(self, target_group_arn: str, load_balancer_security_group_id: str) -> None:
        """Replace the controller's published policy (every load balancer, listener, WAF and
        Shield setting of the account) with what binding this one target group needs: register
        and deregister its targets. The load balancer's rule on the cluster security group
        (which the bound pods' interfaces carry) is CloudFormation's, not the controller's: the
        TargetGroupBinding has no networking section, and the controller no EC2 write."""
        ec2.CfnSecurityGroupIngress(
            self,
            "LoadBalancerToServeProxies",
            group_id=self.cluster.cluster_security_group_id,
            source_security_group_id=load_balancer_security_group_id,
            ip_protocol="tcp",
            from_port=SERVE_PORT,
            to_port=SERVE_PORT,
            description="Model endpoint load balancer to the Ray Serve proxies (pod IPs)",
        )
        document = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "TargetGroupBindingReads",
                    "Effect": "Allow",
                    "Action": list(TARGET_GROUP_BINDING_READS),
                    "Resource": "*",
                },
                {
                    "Sid": "TargetsOfTheEndpoint",
                    "Effect": "Allow",
                    "Action": [
                        "elasticloadbalancing:RegisterTargets",
                        "elasticloadbalancing:DeregisterTargets",
                    ],
                    "Resource": target_group_arn,
                },
            ],
        }
        if self.load_balancer_controller is None:
            return  # the cluster owner's controller, with the owner's policy
        if self._controller_account is not None:  # rebuilt on an imported cluster: no policy yet
            for statement in document["Statement"]:
                self._controller_account.add_to_principal_policy(
                    iam.PolicyStatement.from_json(statement)
                )
            return
        # Set on the L1 itself (not as an override), so cdk-nag and checkov judge this document.
        (policy,) = resources_of_type(self.load_balancer_controller, "AWS::IAM::Policy")
        policy.policy_document = document

    def _on_imported_cluster(self, cluster: eks.ICluster) -> Construct:
        """aws-cdk-lib's AlbController, rebuilt for an existing cluster: its props take a
        Cluster and jsii refuses the ICluster an import gives, though what it builds needs only
        the name, VPC and OIDC provider. The same service account, release, chart version and
        values as lib/aws-eks-v2/lib/alb-controller.js (2.275.0) renders; its IAM policy is
        bind_only's document from the start."""
        controller = Construct(self, "LoadBalancerController")
        namespace, name = "kube-system", "aws-load-balancer-controller"
        account = eks.ServiceAccount(
            controller, "alb-sa", cluster=cluster, namespace=namespace, name=name
        )
        self._controller_account = account
        chart = eks.HelmChart(
            controller,
            "Resource",
            cluster=cluster,
            chart=name,
            repository="https://aws.github.io/eks-charts",
            namespace=namespace,
            release=name,
            version=LOAD_BALANCER_CONTROLLER.helm_chart_version,
            wait=True,
            timeout=Duration.minutes(15),
            values={
                "clusterName": cluster.cluster_name,
                "serviceAccount": {"create": False, "name": account.service_account_name},
                "region": Stack.of(self).region,
                "vpcId": cluster.vpc.vpc_id,
                # AlbController's default repository, in every region.
                "image": {
                    "repository": "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon/"
                    "aws-load-balancer-controller",
                    "tag": LOAD_BALANCER_CONTROLLER.version,
                },
                **TARGET_GROUP_BINDING_ONLY,
            },
        )
        chart.node.add_dependency(account)
        acknowledge(
            controller,
            "AwsSolutions-IAM5[Resource::*]",
            "Only the controller's Describe calls (target groups, target health, VPCs, "
            "security groups, instances, network interfaces), which AWS cannot scope to a "
            "resource; its only writes (register and deregister targets) are scoped to the "
            "one target group.",
        )
        return controller
