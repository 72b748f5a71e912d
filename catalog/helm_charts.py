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
    (cluster.existing.addons.<name>.source installed), why, and where that was read. None: no
    release is too old for what the app relies on."""

    minimum: str | None
    why: str
    source: str


# Each floor is the oldest release that has what the app relies on, read from the add-on's own
# source at each release; not the release the app installs. The Cluster Autoscaler has no floor
# here: it must be of the cluster's minor (catalog/eks_versions.py).
ADDON_FLOORS: dict[str, AddonFloor] = {
    "nvidia_device_plugin": AddonFloor(
        None,
        "every release advertises nvidia.com/gpu, all the app asks of it; 0.19.0 to 0.19.2 are "
        "a hazard, not too old (NVIDIA_MOFED_BY_DEFAULT)",
        "NVIDIA/k8s-device-plugin, cmd/nvidia-device-plugin/main.go at each tag",
    ),
    "kuberay": AddonFloor(
        "1.7.0",
        "the app's RayService restarts the autoscaler sidecar through autoscalerOptions.args and "
        "$KUBERAY_GEN_AUTOSCALER_START_CMD (ray-project/kuberay#4835, first in v1.7.0); v1.6.2's "
        "CRD prunes args, v1.5.1 brought authOptions, v1.5.0 typed worker-group resources and "
        "rayClusterDeletionDelaySeconds",
        "ray-project/kuberay, ray-operator/config/crd/bases/ray.io_rayservices.yaml at each "
        "v1.x tag, checked strictly against the app's rendered RayServices",
    ),
    "load_balancer_controller": AddonFloor(
        "2.4.0",
        "the TargetGroupBinding the app renders (serviceRef, targetGroupARN, targetType ip, "
        "elbv2.k8s.aws/v1beta1) is valid from v2.0.0; v2.0.0 to v2.3.1 run on Kubernetes 1.21 "
        "at most, v2.4.0 and later on 1.19 and later",
        "kubernetes-sigs/aws-load-balancer-controller, the TargetGroupBinding CRD at each tag; "
        "docs/deploy/installation.md, 'Supported Kubernetes versions' (v3.2.2)",
    ),
}

# NVIDIA/k8s-device-plugin 0.19.0 made --mofed-enabled default to true (#1550): containers
# that request GPUs then get /dev/infiniband/uverbs*, the EFA devices' too, and the EFA device
# plugin's pods lose them. 0.19.3 reverted it (#1837). [first, fixed): warn, since an owner may
# run these with mofedEnabled=false, which no setting or AWS API shows.
NVIDIA_MOFED_BY_DEFAULT = ("0.19.0", "0.19.3")

# The EFA device plugin's chart schedules its DaemonSet only on the instance types its values
# list (supportedInstanceLabels); an owner's release that predates a type never runs on those
# nodes and they advertise no vpc.amazonaws.com/efa. Per type, the oldest image from which every
# chart release that ships it lists the type (aws/eks-charts, stable/aws-efa-k8s-device-plugin
# values.yaml at every commit, 2023-12 to 2026-07): p4d and p5 are listed from the first chart
# walked (v0.4.2); p4de from chart v0.4.4; g6, g6e and p5e from chart v0.5.5 and p5en from
# v0.5.6, both with image v0.5.4, which chart v0.5.4 also shipped without them (so v0.5.5);
# p6-b200 from chart v0.5.9 with image v0.5.5, which chart v0.5.8 shipped without it (so v0.5.6).
EFA_PLUGIN_IMAGE_FOR_INSTANCE_FAMILY: dict[str, str] = {
    "p4d": "0.4.2",
    "p5": "0.4.2",
    "p4de": "0.4.4",
    "g6": "0.5.5",
    "g6e": "0.5.5",
    "p5e": "0.5.5",
    "p5en": "0.5.5",
    "p6-b200": "0.5.6",
}
EFA_PLUGIN_SOURCE = (
    "aws/eks-charts, stable/aws-efa-k8s-device-plugin values.yaml (supportedInstanceLabels, "
    "image.tag) at every commit"
)


def efa_device_plugin_floor(instance_types: list[str]) -> AddonFloor:
    """The oldest EFA device plugin image whose chart lists every one of these instance types."""
    families = sorted({instance.partition(".")[0] for instance in instance_types})
    oldest = max(
        (EFA_PLUGIN_IMAGE_FOR_INSTANCE_FAMILY[family] for family in families),
        key=lambda version: tuple(int(part) for part in version.split(".")),
    )
    return AddonFloor(
        oldest,
        f"older charts do not schedule the plugin on {', '.join(families)} nodes",
        EFA_PLUGIN_SOURCE,
    )
