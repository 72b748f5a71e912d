"""The EKS control plane: version, encryption, logging, endpoint exposure, administrators."""

from __future__ import annotations

import json
from dataclasses import dataclass

from aws_cdk import Annotations, RemovalPolicy, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms

from app_config.derived_names import control_plane_log_group
from app_config.model import Cluster as ClusterSettings
from catalog.eks_versions import CLUSTER_ADMIN_POLICY, RELEASES
from constructs import Construct
from constructs.cluster.kubectl_provider_guard import KubectlProviderGuard
from constructs.common.checkov_skips import PROVIDER_LAMBDA_SKIPS, resources_of_type, skip_checks
from constructs.common.encrypted_log_group import encrypted_log_group
from constructs.common.log_encryption_key import LogEncryptionKey
from constructs.common.nag_acknowledgments import acknowledge, aws_managed_policy_finding
from constructs.common.rotating_key import rotating_key

ALL_CONTROL_PLANE_LOGS = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]

# Managed policies aws-cdk-lib attaches to the kubectl provider's Lambda roles and this app keeps.
KUBECTL_HANDLER_MANAGED_POLICIES = (
    "service-role/AWSLambdaBasicExecutionRole",
    "service-role/AWSLambdaVPCAccessExecutionRole",
)
# Also attached by aws-cdk-lib, for Helm charts pulled from ECR (OCI); every chart here comes from
# an HTTPS repository (catalog/helm_charts.py), so the handler loses it: read access to every
# image repository of the account is more than applying manifests needs.
KUBECTL_HANDLER_UNNEEDED_POLICY = "AmazonEC2ContainerRegistryReadOnly"


# cdk-nag prints this conditional attachment verbatim (the condition is the handler's own).
def kubectl_handler_ecr_public_policy(condition: str) -> str:
    return (
        '{"Fn::If":["' + condition + '",{"Fn::Join":["",'
        '["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"'
        ']]},{"Ref":"AWS::NoValue"}]}'
    )


@dataclass(frozen=True)
class ClusterProps:
    """What the cluster stack gives the control plane it creates (EksControlPlane) or the
    existing cluster it imports (constructs/cluster/existing_cluster.py): one set for both."""

    cluster_name: str
    settings: ClusterSettings
    vpc: ec2.IVpc
    removal_policy: RemovalPolicy
    # The Kubernetes group of the operators' access entries; the serving stack binds it to the
    # Roles of manifests/operator-rbac.yaml (what the runbooks use, nothing more).
    operators_group: str
    # Settings.bootstrap_qualifier: the guard exempts this bootstrap's execution role only.
    bootstrap_qualifier: str | None = None


class EksControlPlane(Construct):
    """Publishes ``cluster``, ``secrets_key`` and ``log_key``. Access is by EKS access entry for
    the configured principals only: no role that anyone in the account could assume."""

    def __init__(self, scope: Construct, construct_id: str, props: ClusterProps) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        self.secrets_key = rotating_key(
            self,
            "SecretsKey",
            description=f"Envelope encryption of Kubernetes secrets in {props.cluster_name}",
            removal_policy=props.removal_policy,
        )
        kubernetes = RELEASES[settings.kubernetes_version]
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=props.cluster_name,
            version=kubernetes.eks_version,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubernetes.kubectl_layer(self, "KubectlLayer"),
            ),
            # Managed node groups, not Auto Mode (the aws_eks_v2 default).
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # The managed add-ons in CoreAddons replace the self-managed ones EKS would install.
            bootstrap_self_managed_addons=False,
            bootstrap_cluster_creator_admin_permissions=False,
            vpc=props.vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            endpoint_access=_endpoint_access(settings),
            secrets_encryption_key=self.secrets_key,
            cluster_logging=ALL_CONTROL_PLANE_LOGS,
        )
        if not all(ec2.Subnet.is_vpc_subnet(subnet) for subnet in props.vpc.private_subnets):
            # aws_eks_v2 tags the subnets of a VPC in the app and warns for imported ones.
            Annotations.of(self.cluster).acknowledge_warning(
                "@aws-cdk/aws-eks:clusterMustManuallyTagSubnet",
                "The subnets are an existing VPC's (network.existing_vpc), whose tags the app "
                "does not change; the kubernetes.io/role tags serve only the load balancer "
                "controller's subnet discovery for Services and Ingresses, and the app's "
                "endpoint is its own NLB, bound by TargetGroupBinding.",
            )
        cfn_cluster = self.cluster.node.default_child
        # Explicit, so nobody is moved to extended-support billing (or upgraded) by surprise.
        cfn_cluster.add_property_override("UpgradePolicy.SupportType", settings.support_type)
        self.log_key = LogEncryptionKey(
            self,
            "ProviderLogKey",
            description="Encrypts the control plane's and the kubectl provider's logs",
            removal_policy=props.removal_policy,
        ).key
        # EKS creates /aws/eks/<name>/cluster itself when logging starts, with no retention and
        # no key, unless it exists: so it is created first, and the cluster waits for it.
        self.control_plane_logs = encrypted_log_group(
            self,
            "ControlPlaneLogs",
            key=self.log_key,
            retention_days=settings.control_plane_log_retention_days,
            removal_policy=props.removal_policy,
            log_group_name=control_plane_log_group(props.cluster_name),
        )
        self.cluster.node.add_dependency(self.control_plane_logs)
        self._acknowledge_cdk_managed_parts()
        self._harden_kubectl_provider()
        # Its handler is cluster-admin: the SCP that keeps it CloudFormation's alone.
        self.kubectl_provider_guard = KubectlProviderGuard(
            self,
            "KubectlProviderGuard",
            cluster=self.cluster,
            bootstrap_qualifier=props.bootstrap_qualifier,
        )
        cluster_wide = eks.AccessScopeType.CLUSTER
        for index, principal_arn in enumerate(settings.admin_principal_arns):
            self.cluster.grant_access(
                f"AdminAccess{index}",
                principal_arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        CLUSTER_ADMIN_POLICY, access_scope_type=cluster_wide
                    )
                ],
            )
        for index, principal_arn in enumerate(settings.operator_principal_arns):
            # The id grant_access used: updated in place.
            operator_access(
                self.cluster, f"OperatorAccess{index}", self.cluster, principal_arn,
                props.operators_group,
            )  # fmt: skip

    def _harden_kubectl_provider(self) -> None:
        harden_kubectl_provider(self.cluster.kubectl_provider, self.log_key)

    def _acknowledge_cdk_managed_parts(self) -> None:
        """Findings on resources aws-cdk-lib creates for the cluster, not shaped by this app."""
        acknowledge(
            self.cluster.role,
            aws_managed_policy_finding("AmazonEKSClusterPolicy"),
            "The EKS cluster service role must carry AmazonEKSClusterPolicy (EKS user guide, "
            "'Amazon EKS cluster IAM role'); EKS itself is the only principal that assumes it.",
        )
        acknowledge_kubectl_provider(self.cluster.kubectl_provider)


def operator_access(
    scope: Construct, construct_id: str, cluster: eks.ICluster, principal_arn: str, group: str
) -> eks.AccessEntry:
    """An operator's access entry: no EKS access policy (AmazonEKSEditPolicy would let an
    operator read the Ray token's Secret, exec into pods, run pods as the Ray service accounts
    and delete the network policies); Kubernetes RBAC bound to ``group`` decides instead."""
    entry = eks.AccessEntry(
        scope,
        construct_id,
        cluster=cluster,
        principal=principal_arn,
        access_policies=[],
        access_entry_type=eks.AccessEntryType.STANDARD,
    )
    entry.node.default_child.add_property_override("KubernetesGroups", [group])
    return entry


def harden_kubectl_provider(provider: Construct, log_key: kms.IKey) -> None:
    """Encrypt the provider's log groups (aws-cdk-lib leaves them on the default key) and
    record why checkov's Lambda checks do not apply to its functions. Shared by the cluster the
    app creates and the provider it adds to an existing one."""
    for log_group in resources_of_type(provider, "AWS::Logs::LogGroup"):
        log_group.add_property_override("KmsKeyId", log_key.key_arn)
    for function in resources_of_type(provider, "AWS::Lambda::Function"):
        skip_checks(function, PROVIDER_LAMBDA_SKIPS)
    stack = Stack.of(provider)
    for role in resources_of_type(provider, "AWS::IAM::Role"):
        attached = stack.resolve(role.managed_policy_arns) or []
        kept = [p for p in attached if KUBECTL_HANDLER_UNNEEDED_POLICY not in json.dumps(p)]
        if kept != attached:
            # On the L1 itself, so cdk-nag judges what remains.
            role.managed_policy_arns = [Token.as_string(Token.as_any(p)) for p in kept]


def acknowledge_kubectl_provider(provider: Construct) -> None:
    """The cdk-nag findings on aws-cdk-lib's kubectl provider, which this app does not shape;
    the logical ids in them are read from the provider, wherever it lives."""
    stack = Stack.of(provider)
    handler = provider.node.find_child("Handler")
    handler_id = stack.get_logical_id(handler.node.default_child)
    condition = stack.get_logical_id(handler.node.find_child("HasEcrPublic"))
    handler_reason = (
        "aws-cdk-lib's kubectl provider (Lambda in the VPC, applies manifests and Helm charts "
        "for CloudFormation) needs the AWS managed Lambda execution and VPC access policies "
        "(logs, interfaces in the VPC); its functions can be invoked by any principal IAM "
        "allows, which is why the stack prints a guard SCP (docs/security.md, 'The deploy "
        "path')."
    )
    for policy in KUBECTL_HANDLER_MANAGED_POLICIES:
        acknowledge(provider, aws_managed_policy_finding(policy), handler_reason)
    acknowledge(
        provider,
        "AwsSolutions-IAM4[Policy::" + kubectl_handler_ecr_public_policy(condition) + "]",
        handler_reason + " This one is attached only if the stack uses ECR Public images.",
    )
    acknowledge(
        provider,
        "AwsSolutions-L1",
        "The kubectl handler's Python runtime is chosen by aws-cdk-lib to match its kubectl "
        "and AWS CLI layers; it moves with aws-cdk-lib upgrades, not with this app.",
    )
    acknowledge(
        provider,
        f"AwsSolutions-IAM5[Resource::<{handler_id}.Arn>:*]",
        "The custom resource framework may invoke any version of its own handler function "
        "(arn:...:function:name:*); the wildcard covers versions of that one function only.",
    )


def _endpoint_access(settings: ClusterSettings) -> eks.EndpointAccess:
    if settings.endpoint_access == "private":
        return eks.EndpointAccess.PRIVATE
    return eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(
        *(str(cidr) for cidr in settings.public_access_cidrs)
    )
