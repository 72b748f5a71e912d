"""Helm charts the stacks install, from their official repositories, versions pinned.

Upgrading a chart is a change here only; review the rendered values in the snapshot diff.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HelmChartRef:
    repository: str
    chart: str
    version: str  # exactly as the repository's index.yaml lists it
    namespace: str
    app_version: str | None = None  # the index's appVersion, where a rule depends on it


# aws/eks-charts, stable/aws-efa-k8s-device-plugin (index of 2026-08: chart v0.5.30, image v0.5.20).
# The chart's own node affinity already limits it to EFA-capable instance types.
EFA_DEVICE_PLUGIN = HelmChartRef(
    repository="https://aws.github.io/eks-charts",
    chart="aws-efa-k8s-device-plugin",
    version="v0.5.30",
    namespace="kube-system",
)

# NVIDIA/k8s-device-plugin, deployments/helm/nvidia-device-plugin (v0.20.0, 2026-08-19). Since
# v0.19 it can claim /dev/infiniband/uverbs* for MOFED, which breaks EFA: mofedEnabled=false.
NVIDIA_DEVICE_PLUGIN = HelmChartRef(
    repository="https://nvidia.github.io/k8s-device-plugin",
    chart="nvidia-device-plugin",
    version="0.20.0",
    namespace="kube-system",
)


# ray-project/kuberay-helm (KubeRay 1.7.0; its crds/ folder brings the RayService CRD).
KUBERAY_OPERATOR = HelmChartRef(
    repository="https://ray-project.github.io/kuberay-helm/",
    chart="kuberay-operator",
    version="1.7.0",
    namespace="kuberay-system",
)

# aws/secrets-store-csi-driver-provider-aws (3.1.1); it installs the Secrets Store CSI driver
# chart as a dependency (secrets-store-csi-driver.install: true), so one release covers both.
SECRETS_STORE_CSI_AWS = HelmChartRef(
    repository="https://aws.github.io/secrets-store-csi-driver-provider-aws",
    chart="secrets-store-csi-driver-provider-aws",
    version="3.1.1",
    namespace="kube-system",
)

# kubernetes/autoscaler, charts/cluster-autoscaler (chart 9.59.0 of 2026-07-21, app 1.35.0), the
# newest published. No chart carries a 1.36 appVersion: kubernetes/autoscaler#10169 (chart 9.60.0,
# app 1.36.1) changed only Chart.yaml, the default image tag and the README, and was closed
# unmerged. So the chart's templates are 1.36.1's too, and the image tag picks the autoscaler
# release of the cluster's minor (catalog/eks_versions.py, cluster_autoscaler_image_tag).
CLUSTER_AUTOSCALER = HelmChartRef(
    repository="https://kubernetes.github.io/autoscaler",
    chart="cluster-autoscaler",
    version="9.59.0",
    namespace="kube-system",
    app_version="1.35.0",
)

# Every chart above; the AWS Load Balancer Controller comes through aws-cdk-lib (kube-system).
CHARTS: tuple[HelmChartRef, ...] = (
    EFA_DEVICE_PLUGIN,
    NVIDIA_DEVICE_PLUGIN,
    KUBERAY_OPERATOR,
    SECRETS_STORE_CSI_AWS,
    CLUSTER_AUTOSCALER,
)


@dataclass(frozen=True)
class AddonFloor:
    """The oldest version of an add-on the app accepts when a cluster's owner runs it
    (cluster.existing.addons.<name>.source installed), and why."""

    minimum: str
    why: str


# The versions the app installs and is tested with are the floor: the manifests, Helm values
# and IAM it renders were checked against them, not against older releases. The Cluster
# Autoscaler has no floor here: it must be of the cluster's minor (catalog/eks_versions.py).
ADDON_FLOORS: dict[str, AddonFloor] = {
    # The chart's image, aws/eks-charts stable/aws-efa-k8s-device-plugin values.yaml at v0.5.30.
    "efa_device_plugin": AddonFloor("0.5.20", "the image of the chart the app installs"),
    "nvidia_device_plugin": AddonFloor(
        NVIDIA_DEVICE_PLUGIN.version, "the release the app installs with mofedEnabled=false"
    ),
    "kuberay": AddonFloor(
        KUBERAY_OPERATOR.version,
        "the RayService is validated against KubeRay 1.7.0's CRD (typed worker-group resources "
        "and labels since 1.5, the upgrade strategies of 1.7)",
    ),
    # aws-cdk-lib's AlbControllerVersion.V3_2_2, which the serving stack installs; the
    # TargetGroupBinding-only policy was traced in that release (constructs/serving/
    # serving_operators.py).
    "load_balancer_controller": AddonFloor(
        "3.2.2", "the release whose TargetGroupBinding calls the app's policy was traced in"
    ),
}
