"""Which node the Cluster Autoscaler imagines for a node group, over time: a model of
kubernetes/autoscaler cluster-autoscaler-1.35.2, read from:

- processors/customresources/gpu_processor.go FilterOutNodesWithUnreadyResources: a node that
  carries the provider's GPU label (AWS: k8s.amazonaws.com/accelerator, cloudprovider/aws
  GPULabel) but has no GPU allocatable is treated as not ready;
- processors/nodeinfosprovider/mixed_nodeinfos_processor.go Process: a ready node, Ready for
  longer than the one-minute stabilizationDelay, schedulable and not being deleted, becomes its
  group's template and is cached (refreshed every loop it is seen); a group without such a node
  uses the cached template until it is older than --node-info-cache-expire-time (default
  87600h), and only then the template built from the cloud provider (tests/node_fit_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from tests.node_fit_model import TemplateNode

STABILIZATION_DELAY = timedelta(minutes=1)
DEFAULT_CACHE_EXPIRY = timedelta(hours=87600)
GPU_RESOURCES = ("nvidia.com/gpu",)  # utils/gpu GPUVendorResourceNames, the NVIDIA one


@dataclass(frozen=True)
class RealNode:
    """A node of the group as the API server shows it at one moment."""

    node: TemplateNode
    ready_since: timedelta  # the Ready condition's last transition, on the model's clock


def gpu_ready(node: RealNode, gpu_label: str) -> bool:
    has_label = gpu_label in node.node.labels
    has_gpu = any(node.node.allocatable.get(name, Decimal(0)) > 0 for name in GPU_RESOURCES)
    return not (has_label and not has_gpu)


@dataclass
class TemplateCache:
    """One node group's template, loop after loop."""

    from_provider: TemplateNode  # what CA builds for the group with no node (node_fit_model)
    gpu_label: str
    expiry: timedelta = DEFAULT_CACHE_EXPIRY
    cached: tuple[TemplateNode, timedelta] | None = field(default=None)

    def loop(self, nodes: list[RealNode], now: timedelta) -> TemplateNode:
        ready = [n for n in nodes if gpu_ready(n, self.gpu_label)]
        good = [n for n in ready if n.ready_since + STABILIZATION_DELAY < now]
        if good:
            self.cached = (good[0].node, now)
            return good[0].node
        if self.cached is not None:
            template, added = self.cached
            if now - added <= self.expiry:
                return template
            self.cached = None
        return self.from_provider


def duration(flag: str) -> timedelta:
    """A Go duration as the chart's extraArgs write it: <n>m or <n>h."""
    units = {"m": "minutes", "h": "hours", "s": "seconds"}
    return timedelta(**{units[flag[-1]]: int(flag[:-1])})
