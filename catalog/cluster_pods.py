"""What the add-ons and Helm charts the app installs request per pod, by their pinned defaults.

The app sets no resources on these releases, so each pod requests what its chart or add-on
build asks for by default. A container with limits and no requests requests its limits
(Kubernetes docs, "Resource Management for Pods and Containers"). The node-fit rule
(app_config/rules/node_fit.py) adds these to the pods the app renders itself (the Ray head, the
workers), which it reads from the renderer.

Sources (the chart's values.yaml at the version catalog/helm_charts.py pins, unless noted):
- [kuberay] ray-project/kuberay v1.7.0, helm-chart/kuberay-operator/values.yaml: one replica,
  ``resources.limits`` cpu 100m, memory 512Mi, no requests.
- [ca] kubernetes/autoscaler cluster-autoscaler-chart-9.59.0,
  cluster-autoscaler/charts/cluster-autoscaler/values.yaml: one replica, ``resources: {}``.
- [lbc] aws/eks-charts (commit 20b1f5df, chart 3.2.2), stable/aws-load-balancer-controller:
  two replicas, ``resources: {}``.
- [efa] aws/eks-charts (commit bfe91c4b, chart v0.5.30), stable/aws-efa-k8s-device-plugin:
  requests cpu 10m, memory 20Mi.
- [nvidia] NVIDIA/k8s-device-plugin v0.20.0, deployments/helm/nvidia-device-plugin: ``{}``.
- [cni] aws/amazon-vpc-cni-k8s v1.23.0, charts/aws-vpc-cni/values.yaml (the add-on build is
  v1.23.2): aws-node requests cpu 25m; the node agent ``{}``.
- [cw] aws-observability/helm-charts charts/amazon-cloudwatch-observability/values.yaml at
  chart 6.4.0 (the add-on build is v6.6.0; 6.6.0's values were not in reach): the agent
  DaemonSet requests cpu 250m, memory 128Mi; Fluent Bit 50m, 25Mi; dcgm-exporter 250m, 128Mi
  (its affinity lists the P-class types); the operator Deployment 100m, 64Mi.
- [coredns] CoreDNS's Kubernetes deployment (kubernetes/kubernetes cluster/addons/dns/coredns),
  which the EKS add-on follows: requests cpu 100m, memory 70Mi; two replicas on EKS.
- [kube-proxy] the EKS kube-proxy add-on DaemonSet: requests cpu 100m.
The EKS Pod Identity agent and the node monitoring agent publish no defaults the project could
read, and the Secrets Store CSI driver (installed for a gated model or the GCS store) is not
counted yet; they count as zero here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Where a pod runs: on every node, only on the GPU nodes, or on the system nodes.
Placement = Literal["every", "gpu", "system"]


@dataclass(frozen=True)
class ClusterPod:
    name: str
    placement: Placement
    cpu_millis: int
    memory_mib: int
    source: str
    replicas: int = 1  # for a Deployment; a DaemonSet runs one per node it selects
    # Only when (names the condition the caller checks): "container_logs" (Fluent Bit),
    # "p_class" (dcgm-exporter's node affinity).
    only_when: str | None = None


DAEMON_SETS: tuple[ClusterPod, ...] = (
    ClusterPod("aws-node (VPC CNI)", "every", 25, 0, "[cni]"),
    ClusterPod("kube-proxy", "every", 100, 0, "[kube-proxy]"),
    ClusterPod("eks-pod-identity-agent", "every", 0, 0, "unpublished"),
    ClusterPod("eks-node-monitoring-agent", "every", 0, 0, "unpublished"),
    ClusterPod("cloudwatch-agent", "every", 250, 128, "[cw]"),
    ClusterPod("fluent-bit", "every", 50, 25, "[cw]", only_when="container_logs"),
    ClusterPod("dcgm-exporter", "gpu", 250, 128, "[cw]", only_when="p_class"),
    ClusterPod("aws-efa-k8s-device-plugin", "gpu", 10, 20, "[efa]"),
    ClusterPod("nvidia-device-plugin", "gpu", 0, 0, "[nvidia]"),
)

DEPLOYMENTS: tuple[ClusterPod, ...] = (
    ClusterPod("coredns", "system", 100, 70, "[coredns]", replicas=2),
    ClusterPod("kuberay-operator", "system", 100, 512, "[kuberay]"),
    ClusterPod("aws-load-balancer-controller", "system", 0, 0, "[lbc]", replicas=2),
    ClusterPod("cluster-autoscaler", "system", 0, 0, "[ca]"),
    ClusterPod("amazon-cloudwatch-observability operator", "system", 100, 64, "[cw]"),
)
