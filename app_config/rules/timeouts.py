"""Timeouts that must nest across layers: what a worker pod's drain promises against what EKS
and the load balancer allow.

What the app renders from ``serving.drain_timeout_seconds`` (app_config/drain.py), and how each
layer's wait relates to the next:

| layer | wait | relation | holds by |
|---|---|---|---|
| Ray Serve 2.58 | ``graceful_shutdown_timeout_s`` = drain | <= the preStop's wait | construction |
| pod preStop | settle (15 s) + drain | < ``terminationGracePeriodSeconds`` | construction |
| Kubernetes | grace = settle + drain + Ray's drain (30 s) + 15 s | <= GCS reconnect | construction|
| NLB target | deregistration delay = settle + drain | <= 3600 s (ELB) | drain <= 3000 |
| KubeRay | ``rayClusterDeletionDelaySeconds`` | >= the new targets' health | its validator |
| EKS node update | a node's pods must leave within 15 minutes | grace <= 900 s | **this rule** |

EKS user guide, "Understand each phase of node updates" (managed-node-update-behavior, upgrade
phase, both the default and the minimal strategy): "It drains the Pods from the node. If the Pods
don't leave the node within 15 minutes and there's no force flag, the upgrade phase fails with a
PodEvictionFailure error." The node groups set ``ForceUpdateEnabled: false``
(constructs/gpu_nodes/efa_node_group.py) so that an update never deletes pods the budgets
protect; a pod that may take its whole grace period to leave then fails the update, and
CloudFormation rolls the gpu-nodes stack back. The Cluster Autoscaler never drains a node that
holds a Ray worker (safe-to-evict=false), so its own 10-minute cap on graceful termination
(``--max-graceful-termination-sec``) does not apply to workers.

Not modelled: where a side has a PodDisruptionBudget, the next node's eviction also waits until
the replacement worker of the previous one is ready (the model loaded), which counts against the
same 15 minutes; that time depends on the model and the network, not on a setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.drain import termination_grace_seconds
from app_config.errors import Finding
from app_config.rules import Rule

if TYPE_CHECKING:
    from app_config.model import Settings

# EKS managed node group updates: how long the pods of a node being replaced may take to leave.
EKS_NODE_DRAIN_SECONDS = 15 * 60


def longest_drain_within_node_update() -> int:
    """The largest drain timeout whose grace period still fits EKS's 15 minutes."""
    return EKS_NODE_DRAIN_SECONDS - (termination_grace_seconds(0))


def drain_beyond_node_update(settings: Settings) -> Iterator[Finding]:
    drain = settings.serving.drain_timeout_seconds
    grace = termination_grace_seconds(drain)
    if grace > EKS_NODE_DRAIN_SECONDS:
        yield Finding(
            "serving.drain_timeout_seconds",
            f"gives each Ray worker pod a termination grace period of {grace} s, but an EKS "
            "managed node group update waits 15 minutes for a node's pods to leave and then "
            "fails (PodEvictionFailure; the node groups do not force updates), rolling the "
            "gpu-nodes stack back (EKS user guide, 'Understand each phase of node updates'). "
            f"Use at most {longest_drain_within_node_update()}",
            drain,
        )


RULES = (Rule("drain-beyond-node-update", frozenset({"serving"}), drain_beyond_node_update),)
