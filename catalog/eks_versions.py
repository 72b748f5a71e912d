"""The Kubernetes version of the cluster and everything whose version must move with it.

Upgrading Kubernetes is a change to this file only: bump ``KUBERNETES``, the kubectl layer import
and the pinned ``aws-cdk.lambda-layer-kubectl-vNN`` in requirements.txt, and each add-on to a build
that ``aws eks describe-addon-versions --kubernetes-version <minor>`` lists
(see docs/operating.md, "Upgrading").
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer


@dataclass(frozen=True)
class KubernetesRelease:
    """A Kubernetes minor version and the kubectl Lambda layer built for the same minor."""

    minor: str
    kubectl_layer: type

    @property
    def eks_version(self) -> eks.KubernetesVersion:
        return eks.KubernetesVersion.of(self.minor)


# 1.35 is in EKS standard support until 2027-03-27 (EKS user guide, "Kubernetes version lifecycle").
# The design card named 1.29 with lambda-layer-kubectl-v29; 1.29 left extended support on 2026-03-23
# and EKS no longer creates clusters on it.
KUBERNETES = KubernetesRelease(minor="1.35", kubectl_layer=KubectlV35Layer)


@dataclass(frozen=True)
class ManagedAddon:
    name: str
    version: str


# Builds listed for Kubernetes 1.35 by `aws eks describe-addon-versions` (checked 2026-10).
# vpc-cni must be >= 1.18.5: EFA-only interfaces on p5-class nodes depend on it
# (EKS user guide, "Manage EFA devices on Amazon EKS").
VPC_CNI = ManagedAddon("vpc-cni", "v1.23.2-eksbuild.1")
COREDNS = ManagedAddon("coredns", "v1.14.6-eksbuild.4")
KUBE_PROXY = ManagedAddon("kube-proxy", "v1.35.3-eksbuild.29")
POD_IDENTITY_AGENT = ManagedAddon("eks-pod-identity-agent", "v1.4.0-eksbuild.3")

CORE_ADDONS: tuple[ManagedAddon, ...] = (VPC_CNI, COREDNS, KUBE_PROXY, POD_IDENTITY_AGENT)

# Container Insights with enhanced observability (NVIDIA GPU metrics through its dcgm-exporter,
# EFA metrics, container logs). v6.6.0-eksbuild.1 is the newest build found listed for 1.35
# (2026-09); AWS documents features "in 8.0.0 and later" that this app does not use.
CLOUDWATCH_OBSERVABILITY = ManagedAddon("amazon-cloudwatch-observability", "v6.6.0-eksbuild.1")
# Sets the AcceleratedHardwareReady / NetworkingReady / KernelReady / StorageReady /
# ContainerRuntimeReady node conditions that managed node group auto repair acts on.
# v1.6.4 (2026-04) is the newest build seen listed for 1.35; the agent itself is at v1.7.0.
NODE_MONITORING_AGENT = ManagedAddon("eks-node-monitoring-agent", "v1.6.4-eksbuild.1")

OBSERVABILITY_ADDONS: tuple[ManagedAddon, ...] = (CLOUDWATCH_OBSERVABILITY, NODE_MONITORING_AGENT)
