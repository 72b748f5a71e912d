"""The Kubernetes version of the cluster and everything whose version must move with it.

Upgrading Kubernetes is a change to this file only: bump ``KUBERNETES``, the kubectl layer import
and the pinned ``aws-cdk.lambda-layer-kubectl-vNN`` in requirements.txt, and each add-on to a build
that ``aws eks describe-addon-versions --kubernetes-version <minor>`` lists
(see README, "Upgrading").
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
