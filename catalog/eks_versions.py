"""The Kubernetes versions a cluster may run and everything whose version must move with it.

`cluster.kubernetes_version` picks a row of ``RELEASES``: the EKS minor, the kubectl Lambda layer
built for it (the pinned ``aws-cdk.lambda-layer-kubectl-vNN`` in requirements.txt), the kube-proxy
build made for it and the Cluster Autoscaler release of the same minor. Adding a minor is a new
row here and in the setting's choices; the other add-on builds serve several minors
(see docs/operating.md, "Upgrading").
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # aws_cdk starts jsii's Node process: pdctl reads this module without it
    from aws_cdk import aws_eks_v2 as eks


@dataclass(frozen=True)
class ManagedAddon:
    name: str
    version: str


@dataclass(frozen=True)
class KubernetesRelease:
    """A Kubernetes minor version and what is built for the same minor."""

    minor: str
    kube_proxy: ManagedAddon
    # registry.k8s.io/autoscaling/cluster-autoscaler tag, of the cluster's minor: "We recommend
    # using Cluster Autoscaler with the Kubernetes control plane version for which it was meant"
    # (kubernetes/autoscaler cluster-autoscaler/README.md, "Releases", at tag
    # cluster-autoscaler-1.36.1).
    cluster_autoscaler_image_tag: str

    @property
    def eks_version(self) -> eks.KubernetesVersion:
        from aws_cdk import aws_eks_v2 as eks

        return eks.KubernetesVersion.of(self.minor)

    @property
    def kubectl_layer(self) -> type:
        """The layer's construct class, imported only for the minor a synth uses: each layer
        package loads its whole asset assembly into jsii (about 0.2 s of every synth)."""
        digits = self.minor.replace("1.", "", 1)
        module = importlib.import_module(f"aws_cdk.lambda_layer_kubectl_v{digits}")
        return getattr(module, f"KubectlV{digits}Layer")


# kube-proxy: the EKS user guide's "Manage kube-proxy" table lists one build per minor (1.36:
# v1.36.0-eksbuild.14; 1.35: checked against `aws eks describe-addon-versions` 2026-10).
# Cluster Autoscaler: the newest patch of each minor (kubernetes/autoscaler tags
# cluster-autoscaler-1.36.1 of 2026-07-22 and cluster-autoscaler-1.35.2). Standard support: 14
# months from each minor's EKS release (EKS user guide, "Kubernetes version lifecycle"); 1.35's
# ends 2027-03-27.
RELEASES: dict[str, KubernetesRelease] = {
    "1.36": KubernetesRelease(
        minor="1.36",
        kube_proxy=ManagedAddon("kube-proxy", "v1.36.0-eksbuild.14"),
        cluster_autoscaler_image_tag="v1.36.1",
    ),
    "1.35": KubernetesRelease(
        minor="1.35",
        kube_proxy=ManagedAddon("kube-proxy", "v1.35.3-eksbuild.29"),
        cluster_autoscaler_image_tag="v1.35.2",
    ),
}
DEFAULT_MINOR = "1.36"
# The EKS access policy of the kubectl handler (the app's, and an owner's it uses instead):
# the Helm charts install CRDs and ClusterRoles (EKS user guide, "Review access policy
# permissions").
CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# What `make synth` builds. Older EKS samples pin 1.29 with lambda-layer-kubectl-v29; 1.29 left
# extended support on 2026-03-23 and EKS no longer creates clusters on it.
KUBERNETES = RELEASES[DEFAULT_MINOR]


# Builds listed for Kubernetes 1.35 by `aws eks describe-addon-versions` (checked 2026-10); not
# confirmed for 1.36 here (no AWS account): `aws eks describe-addon-versions --kubernetes-version
# 1.36 --addon-name <name>` lists them before a deploy.
# vpc-cni must be >= 1.18.5: EFA-only interfaces on p5-class nodes depend on it
# (EKS user guide, "Manage EFA devices on Amazon EKS").
VPC_CNI = ManagedAddon("vpc-cni", "v1.23.2-eksbuild.1")
COREDNS = ManagedAddon("coredns", "v1.14.6-eksbuild.4")
POD_IDENTITY_AGENT = ManagedAddon("eks-pod-identity-agent", "v1.4.0-eksbuild.3")

# Each of these builds serves several minors (EKS Distro ships one CoreDNS, 1.14, for 1.33 to
# 1.37); kube-proxy is per minor, in RELEASES.
CORE_ADDONS: tuple[ManagedAddon, ...] = (VPC_CNI, COREDNS, POD_IDENTITY_AGENT)

# Container Insights with enhanced observability (NVIDIA GPU metrics through its dcgm-exporter,
# EFA metrics, container logs). v6.6.0-eksbuild.1 is the newest build found listed for 1.35
# (2026-09); AWS documents features "in 8.0.0 and later" that this app does not use.
CLOUDWATCH_OBSERVABILITY = ManagedAddon("amazon-cloudwatch-observability", "v6.6.0-eksbuild.1")
# Sets the AcceleratedHardwareReady / NetworkingReady / KernelReady / StorageReady /
# ContainerRuntimeReady node conditions that managed node group auto repair acts on.
# v1.6.4 (2026-04) is the newest build seen listed for 1.35; the agent itself is at v1.7.0.
NODE_MONITORING_AGENT = ManagedAddon("eks-node-monitoring-agent", "v1.6.4-eksbuild.1")

OBSERVABILITY_ADDONS: tuple[ManagedAddon, ...] = (CLOUDWATCH_OBSERVABILITY, NODE_MONITORING_AGENT)
