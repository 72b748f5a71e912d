"""The cluster stack: control plane, system nodes, add-ons and the alarm topic; the GPU node groups
live in their own stack (stacks/gpu_nodes_stack.py)."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2

from app_config import Settings
from catalog.eks_versions import RELEASES
from constructs import Construct
from constructs.cluster.alarm_topic import AlarmTopic
from constructs.cluster.cluster_autoscaler import ClusterAutoscaler
from constructs.cluster.core_addons import CoreAddons
from constructs.cluster.eks_control_plane import ClusterProps, EksControlPlane
from constructs.cluster.existing_cluster import ExistingClusterImport
from constructs.cluster.image_cache import ImageCache
from constructs.cluster.image_mirror import ImageMirrorImport
from constructs.cluster.node_role import NodeRole
from constructs.cluster.observability_addons import ObservabilityAddons, ObservabilityAddonsProps
from constructs.cluster.system_node_group import SystemNodeGroup
from constructs.common.auto_scaling_group import DeploymentTag, harden_lookup_provider
from constructs.common.log_encryption_key import LogEncryptionKey
from constructs.common.session_tunnel import TunnelDestination, TunnelDocument, TunnelPolicy
from serving_manifests.image import mirror_repository
from serving_manifests.operator_access import OPERATORS_GROUP
from stacks.common import removal_policy
from stacks.tunnel import API_LOCAL_PORT, api_tunnel_document, host_of, port_forward_command


class ClusterStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        vpc: ec2.IVpc,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        existing = settings.cluster.existing
        # The barrier the Helm releases of this stack wait for: the kubectl handler's access
        # entry on an existing cluster (a created cluster has its own barrier).
        self.kubectl_access: Construct | None = None
        # One set of properties: the control plane the app creates, or the cluster it imports.
        props = ClusterProps(
            cluster_name=settings.cluster_name,
            settings=settings.cluster,
            vpc=vpc,
            removal_policy=removal_policy(settings),
            operators_group=OPERATORS_GROUP,
            bootstrap_qualifier=settings.bootstrap_qualifier,
        )
        if existing is None:
            self.control_plane = EksControlPlane(self, "ControlPlane", props)
        else:
            self.control_plane = ExistingClusterImport(self, "ExistingCluster", props)
            self.kubectl_access = self.control_plane.kubectl_access
        cluster = self.control_plane.cluster
        kubernetes = RELEASES[settings.cluster.kubernetes_version]
        # An existing cluster has its own networking, DNS and kube-proxy (preflight checks them).
        self.addons = (
            CoreAddons(self, "Addons", cluster=cluster, kube_proxy=kubernetes.kube_proxy)
            if existing is None
            else None
        )
        self.node_role = NodeRole(self, "NodeRole", description="Nodes of the serving cluster")
        if settings.serving.image_cache.enabled:
            ImageCache(
                self,
                "ImageCache",
                settings=settings.serving.image_cache,
                prefix=settings.prefix,
                node_role=self.node_role.role,
            )
        mirror = settings.serving.image_mirror
        mirrored = mirror_repository(settings)
        if mirror and mirror.pull_through_cache and mirrored and mirrored.ecr:
            ImageMirrorImport(
                self,
                "ImageMirrorImport",
                repository=mirrored.ecr,
                node_role=self.node_role.role,
            )
        self.system_nodes = SystemNodeGroup(
            self,
            "SystemNodes",
            cluster=cluster,
            kubernetes_version=kubernetes.minor,
            settings=settings.cluster.system_nodes,
            node_role=self.node_role.role,
        )
        # Networking first (a node without the CNI never turns Ready), CoreDNS once nodes exist
        # (its pods would otherwise leave the add-on DEGRADED and the deployment failing). The
        # GPU nodes, in their own stack, come after this whole stack.
        if self.addons is not None:
            for addon in self.addons.needed_by_nodes:
                self.system_nodes.nodegroup.node.add_dependency(addon)
            for addon in self.addons.needing_nodes:
                addon.node.add_dependency(self.system_nodes.nodegroup)
        self.cluster_autoscaler = None
        if existing is None or existing.addons.installs("cluster_autoscaler"):
            self.cluster_autoscaler = ClusterAutoscaler(
                self, "ClusterAutoscaler", settings=settings, cluster=cluster
            )
            self.cluster_autoscaler.node.add_dependency(self.system_nodes.nodegroup)
            if self.kubectl_access is not None:
                self.cluster_autoscaler.node.add_dependency(self.kubectl_access)
        # The app's autoscaler (or an owner's that discovers by it) resizes only tagged groups.
        DeploymentTag(
            self,
            "SystemNodesDeploymentTag",
            cluster_name=settings.cluster_name,
            nodegroup=self.system_nodes.nodegroup,
            prefix=settings.prefix,
        )
        harden_lookup_provider(
            self,
            removal_policy=removal_policy(settings),
            key_description="Encrypts the system node group's lookup function logs",
        )
        self._observability(settings)
        self._outputs(settings)

    def _observability(self, settings: Settings) -> None:
        """Cluster-level watching: the add-ons (Container Insights, node monitoring) and the
        alarm topic every alarm of the deployment notifies."""
        cluster = self.control_plane.cluster
        log_key = LogEncryptionKey(
            self,
            "ContainerInsightsLogKey",
            description="Encrypts the Container Insights log groups",
            removal_policy=removal_policy(settings),
        ).key
        self.observability_addons = ObservabilityAddons(
            self,
            "ObservabilityAddons",
            ObservabilityAddonsProps(
                cluster=cluster,
                cluster_name=settings.cluster_name,
                settings=settings.observability,
                gpu_placements=settings.gpu_nodes.placements(),
                log_key=log_key,
                removal_policy=removal_policy(settings),
            ),
        )
        for addon in self.observability_addons.addons:
            addon.node.add_dependency(self.system_nodes.nodegroup)
        self.alarm_topic = AlarmTopic(
            self,
            "AlarmTopic",
            emails=[str(email) for email in settings.observability.alarms.emails],
            removal_policy=removal_policy(settings),
        )

    def _outputs(self, settings: Settings) -> None:
        cluster = self.control_plane.cluster
        CfnOutput(self, "ClusterName", value=cluster.cluster_name)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --name {settings.cluster_name} "
            f"--region {settings.region}",
            description="Run as one of cluster.admin_principal_arns or operator_principal_arns",
        )
        # The private API server from a laptop: README, "Reaching what you deployed". The
        # tunnel reaches the API server's 443 and nothing else (constructs/common/
        # session_tunnel.py); operators attach ApiTunnelPolicyArn to open it.
        api_host = host_of(cluster.cluster_endpoint)
        tunnel = TunnelDocument(
            self,
            "ApiTunnel",
            name=api_tunnel_document(settings),
            to=TunnelDestination(
                host=api_host,
                port=443,
                description="Forwards a local port to the Kubernetes API of "
                f"{settings.cluster_name}",
            ),
        )
        policy = TunnelPolicy(
            self,
            "ApiTunnelPolicy",
            cluster_name=settings.cluster_name,
            documents=[tunnel],
            description=f"Opens the Session Manager tunnel to the Kubernetes API of "
            f"{settings.cluster_name}, and nothing else on its nodes",
        )
        CfnOutput(
            self,
            "ApiTunnelCommand",
            value=port_forward_command(
                settings.cluster_name, settings.region, tunnel.name, API_LOCAL_PORT
            ),
            description=f"Forwards localhost:{API_LOCAL_PORT} to the private Kubernetes API "
            "through a node (Session Manager); keep it running. Needs ApiTunnelPolicyArn",
        )
        CfnOutput(
            self,
            "ApiTunnelPolicyArn",
            value=policy.policy.managed_policy_arn,
            description="Attach to whoever opens the API tunnel: ssm:StartSession with this "
            "stack's fixed-destination document only (no shell, no other host)",
        )
        CfnOutput(
            self,
            "TunnelKubeconfigCommand",
            value=f"aws eks update-kubeconfig --name {settings.cluster_name} --region "
            f"{settings.region} && kubectl config set-cluster {cluster.cluster_arn} --server "
            f"https://localhost:{API_LOCAL_PORT} --tls-server-name {api_host}",
            description="Points kubectl (and pdctl) at the tunnel; the server certificate is "
            "still checked against the API server's name. UpdateKubeconfigCommand undoes it",
        )
