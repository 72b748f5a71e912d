"""EKS managed add-ons every node needs, pinned to builds made for the cluster's version."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from catalog.eks_versions import COREDNS, POD_IDENTITY_AGENT, VPC_CNI, ManagedAddon
from constructs import Construct
from constructs.cluster.managed_addon import managed_addon
from constructs.common.irsa import ServiceAccountRole
from constructs.common.nag_acknowledgments import acknowledge, aws_managed_policy_finding

# The VPC CNI add-on's own network policy agent enforces Kubernetes NetworkPolicy (EKS user
# guide, "Restrict pod network traffic with Kubernetes network policies"); the value is a string.
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
CNI_POLICY = "AmazonEKS_CNI_Policy"


class CoreAddons(Construct):
    """vpc-cni (with its IRSA role and network policy enforcement), coredns, kube-proxy and the
    Pod Identity agent. Publishes ``needed_by_nodes`` and ``needing_nodes`` for ordering."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        kube_proxy: ManagedAddon,  # the build made for the cluster's minor
    ) -> None:
        super().__init__(scope, construct_id)
        cni_role = ServiceAccountRole(
            self,
            "VpcCniRole",
            cluster=cluster,
            namespace="kube-system",
            service_account="aws-node",
            description="VPC CNI (aws-node): attaches ENIs and assigns pod IPs",
        )
        cni_role.role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(CNI_POLICY))
        acknowledge(
            cni_role.role,
            aws_managed_policy_finding(CNI_POLICY),
            "The VPC CNI needs EC2 ENI and IP-assignment actions on any ENI the node may get; AWS "
            "maintains this policy for exactly that, and IRSA limits it to kube-system:aws-node.",
        )
        self.cni_role = cni_role.role
        vpc_cni = managed_addon(
            self,
            cluster,
            VPC_CNI,
            configuration=VPC_CNI_CONFIGURATION,
            service_account_role=self.cni_role,
        )
        kube_proxy_addon = managed_addon(self, cluster, kube_proxy)
        pod_identity_agent = managed_addon(self, cluster, POD_IDENTITY_AGENT)
        coredns = managed_addon(self, cluster, COREDNS)
        # DaemonSets a node needs to turn Ready, and Deployments that need a Ready node.
        self.needed_by_nodes = (vpc_cni, kube_proxy_addon, pod_identity_agent)
        self.needing_nodes = (coredns,)
