"""The EFA and NVIDIA device plugins, which turn a GPU node's hardware into schedulable resources
(``vpc.amazonaws.com/efa``, ``nvidia.com/gpu``) for the Ray worker pods.

The EFA device plugin, not the EFA DRA driver: each Ray worker pod takes every GPU and every EFA
device of its node, so DRA's topology-aware GPU-EFA pairing has nothing to choose, while the
integer resource is what the Ray LLM image's AWS examples and KubeRay worker groups request.
The two must not run on the same node (EKS user guide, "Manage EFA devices on Amazon EKS").
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_eks_v2 as eks

from app_config.model import NodePlacement
from app_config.node_labels import EFA_LABEL, GPU_PRESENT_LABEL
from catalog.helm_charts import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN
from constructs import Construct
from constructs.common.helm_release import helm_release


def tolerations(placements: list[NodePlacement]) -> list[dict[str, str]]:
    """Tolerate exactly the taints of the given node groups (each once)."""
    unique = {tuple(t.items()): t for p in placements for t in p.tolerations()}
    return list(unique.values())


def efa_plugin_values(placements: list[NodePlacement]) -> dict[str, Any]:
    return {"nodeSelector": {EFA_LABEL: "true"}, "tolerations": tolerations(placements)}


def nvidia_plugin_values(placements: list[NodePlacement]) -> dict[str, Any]:
    return {
        "mofedEnabled": False,
        "nodeSelector": {GPU_PRESENT_LABEL: "true"},
        # Replaces the chart's default list, so CriticalAddonsOnly stays tolerated explicitly.
        "tolerations": [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            *tolerations(placements),
        ],
    }


class DevicePlugins(Construct):
    """Publishes ``efa_values`` and ``nvidia_values`` (the rendered Helm values)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        gpu_placements: list[NodePlacement],
        install_efa: bool = True,
        install_nvidia: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        self.efa_values = efa_plugin_values(gpu_placements)
        self.nvidia_values = nvidia_plugin_values(gpu_placements)
        # wait=False: DaemonSets on GPU node groups scaled to zero would never report ready.
        # None where an existing cluster's owner runs the plugin (cluster.existing.addons).
        self.efa = helm_release(
            self, "EfaDevicePlugin", cluster=cluster, chart=EFA_DEVICE_PLUGIN,
            values=self.efa_values, wait=False,
        ) if install_efa else None  # fmt: skip
        self.nvidia = helm_release(
            self, "NvidiaDevicePlugin", cluster=cluster, chart=NVIDIA_DEVICE_PLUGIN,
            values=self.nvidia_values, wait=False,
        ) if install_nvidia else None  # fmt: skip
