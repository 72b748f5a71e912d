"""An existing EKS cluster (cluster.existing), imported from its attributes, with the kubectl
provider the app applies its manifests and Helm charts through.

What aws-cdk-lib 2.275's ``aws_eks_v2`` gives an imported cluster (``Cluster.
from_cluster_attributes``, lib/aws-eks-v2/lib/cluster.js ``ImportedCluster``): the name, ARN,
VPC, cluster security group, endpoint and OIDC provider handed back as given, ``add_manifest`` /
``add_helm_chart`` / ``add_service_account`` through the ``kubectl_provider`` passed in, and
managed node groups and add-ons that take it as their cluster. Where it falls short:

- ``ClusterAttributes.kubectl_provider_options`` is accepted but never read: ``ImportedCluster``'s
  constructor keeps only ``kubectl_provider``, so an imported cluster has no provider unless one
  is built beside it. Here ``eks.KubectlProvider`` is built on a first import (it needs a cluster
  for its ARN, VPC and security group) and a second import carries it.
- Nothing gives the provider's handler access to a cluster the app did not create (a created
  cluster gets an access entry for it and a barrier every manifest waits for): here an
  ``eks.AccessEntry`` with AmazonEKSClusterAdminPolicy, which the Helm releases of this stack
  depend on. It needs the cluster's authentication mode to take access entries (API or
  API_AND_CONFIG_MAP; `pdctl preflight` checks).
- ``KubectlProvider.from_kubectl_provider_attributes`` imports a provider the owner runs
  (cluster.existing.kubectl_provider): then the app builds no handler and no access entry; the
  owner's role needs cluster admin (`pdctl preflight` checks its access policies). It must be an
  ``aws_eks_v2`` provider: ``aws_eks``'s handler reads a RoleArn from every resource
  (custom-resource-handlers aws-eks/kubectl-handler apply and helm), which v2 resources omit.
- No version, add-on list, authentication mode or network policy support is known to an imported
  cluster; synth cannot check them, `pdctl preflight` does (pdctl/existing_cluster.py).
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from catalog.eks_versions import CLUSTER_ADMIN_POLICY, RELEASES
from constructs import Construct
from constructs.cluster.eks_control_plane import (
    ClusterProps,
    acknowledge_kubectl_provider,
    harden_kubectl_provider,
    operator_access,
)
from constructs.cluster.kubectl_provider_guard import KubectlProviderGuard
from constructs.common.log_encryption_key import LogEncryptionKey


class ExistingClusterImport(Construct):
    """Publishes ``cluster`` (an ICluster carrying the kubectl provider) and ``kubectl_access``
    (the app's handler's access entry, which manifests of this stack wait for; None with the
    owner's provider), as EksControlPlane publishes ``cluster``, so that nothing downstream
    knows whose it is."""

    def __init__(self, scope: Construct, construct_id: str, props: ClusterProps) -> None:
        super().__init__(scope, construct_id)
        existing = props.settings.existing
        assert existing is not None  # the cluster stack builds this only for one
        attributes = {
            "cluster_name": props.cluster_name,
            "cluster_endpoint": existing.endpoint,
            "cluster_security_group_id": existing.cluster_security_group_id,
            "vpc": props.vpc,
            "open_id_connect_provider": iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
                self, "OidcProvider", existing.oidc_provider_arn
            ),
        }
        self.kubectl_access: eks.AccessEntry | None = None
        if existing.kubectl_provider is not None:
            # The owner's provider: its handler's access is the owner's, so is its guard.
            self.kubectl_provider = eks.KubectlProvider.from_kubectl_provider_attributes(
                self,
                "KubectlProvider",
                service_token=existing.kubectl_provider.service_token,
                role=iam.Role.from_role_arn(
                    self, "KubectlRole", existing.kubectl_provider.role_arn, mutable=False
                ),
            )
            self.cluster = eks.Cluster.from_cluster_attributes(
                self, "Cluster", kubectl_provider=self.kubectl_provider, **attributes
            )
            self._principals(props)
            return
        reference = eks.Cluster.from_cluster_attributes(self, "ClusterReference", **attributes)
        kubernetes = RELEASES[props.settings.kubernetes_version]
        self.kubectl_provider = eks.KubectlProvider(
            self,
            "KubectlProvider",
            cluster=reference,
            kubectl_layer=kubernetes.kubectl_layer(self, "KubectlLayer"),
            # In the VPC, in the cluster security group (aws-cdk-lib's default with subnets):
            # the API endpoint may be private only.
            private_subnets=props.vpc.private_subnets,
        )
        self.cluster = eks.Cluster.from_cluster_attributes(
            self, "Cluster", kubectl_provider=self.kubectl_provider, **attributes
        )
        self.log_key = LogEncryptionKey(
            self,
            "ProviderLogKey",
            description="Encrypts the kubectl provider's logs",
            removal_policy=props.removal_policy,
        ).key
        harden_kubectl_provider(self.kubectl_provider, self.log_key)
        acknowledge_kubectl_provider(self.kubectl_provider)
        self.kubectl_access = eks.AccessEntry(
            self,
            "KubectlAccess",
            cluster=self.cluster,
            principal=self.kubectl_provider.role.role_arn,
            access_policies=[
                eks.AccessPolicy.from_access_policy_name(
                    CLUSTER_ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                )
            ],
        )
        # Its handler is cluster-admin: the SCP that keeps it CloudFormation's alone.
        self.kubectl_provider_guard = KubectlProviderGuard(
            self,
            "KubectlProviderGuard",
            cluster=self.cluster,
            bootstrap_qualifier=props.bootstrap_qualifier,
        )
        self._principals(props)

    def _principals(self, props: ClusterProps) -> None:
        """The configured admins and operators get access entries as on a cluster the app
        creates (`pdctl preflight` fails for one that holds an entry already: EKS allows one
        per principal)."""
        for index, principal_arn in enumerate(props.settings.admin_principal_arns):
            eks.AccessEntry(
                self,
                f"AdminAccess{index}",
                cluster=self.cluster,
                principal=principal_arn,
                access_policies=[
                    eks.AccessPolicy.from_access_policy_name(
                        CLUSTER_ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
        for index, principal_arn in enumerate(props.settings.operator_principal_arns):
            operator_access(
                self, f"OperatorAccess{index}", self.cluster, principal_arn, props.operators_group
            )
