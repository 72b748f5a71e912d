"""Does a pending pod fit the node the Cluster Autoscaler imagines for an empty node group?

The template node, as Cluster Autoscaler 1.35 builds it for an EKS managed node group with no
node (kubernetes/autoscaler cluster-autoscaler-1.35.2, cloudprovider/aws/aws_manager.go
buildNodeFromTemplate, aws_wrapper.go getManagedNodegroupInfo):
- capacity = allocatable: the instance type's vCPUs, memory and GPUs (nvidia.com/gpu), 110 pods;
- resources from `k8s.io/cluster-autoscaler/node-template/resources/<name>` tags, which for a
  managed node group are read from the node group's own tags and override the rest;
- labels: the node group's labels plus those EKS reports (eks.amazonaws.com/nodegroup,
  eks.amazonaws.com/capacityType, ...);
- taints: the node group's taints, only those with both a key and a value.
A pod fits when its node selector is a subset of the labels, it tolerates every NoSchedule and
NoExecute taint, and each of its requests is at most the allocatable amount (the scheduler's
NodeResourcesFit, TaintToleration and NodeAffinity predicates that CA's simulation runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from app_config.node_template import RESOURCE_TAG_PREFIX

PODS_PER_TEMPLATE_NODE = 110
# The EKS API's taint effects, in Kubernetes' spelling.
EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}


@dataclass(frozen=True)
class TemplateNode:
    name: str
    labels: dict[str, str]
    taints: list[dict[str, str]]  # key, value, effect (Kubernetes spelling)
    allocatable: dict[str, Decimal]


def template_node(
    name: str, nodegroup: dict[str, Any], vcpus: int, memory_gib: int, gpus: int
) -> TemplateNode:
    """From an AWS::EKS::Nodegroup's properties and the instance type's facts."""
    allocatable = {
        "cpu": Decimal(vcpus),
        "memory": Decimal(memory_gib) * 2**30,
        "pods": Decimal(PODS_PER_TEMPLATE_NODE),
    }
    if gpus:
        allocatable["nvidia.com/gpu"] = Decimal(gpus)
    for key, value in (nodegroup.get("Tags") or {}).items():
        if key.startswith(RESOURCE_TAG_PREFIX):
            allocatable[key.removeprefix(RESOURCE_TAG_PREFIX)] = parse_quantity(value)
    labels = {
        **(nodegroup.get("Labels") or {}),
        "eks.amazonaws.com/nodegroup": name,
        "eks.amazonaws.com/capacityType": nodegroup.get("CapacityType", "ON_DEMAND"),
    }
    taints = [
        {"key": t["Key"], "value": t["Value"], "effect": EFFECTS[t["Effect"]]}
        for t in nodegroup.get("Taints") or []
        if t.get("Key") and t.get("Value")
    ]
    return TemplateNode(name, labels, taints, allocatable)


def unfit_reasons(pod: dict[str, Any], node: TemplateNode) -> list[str]:
    """Why ``pod`` (a pod spec) cannot land on ``node``; empty when it fits."""
    reasons = []
    for key, value in (pod.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            reasons.append(f"node selector {key}={value}")
    for taint in node.taints:
        if taint["effect"] == "PreferNoSchedule":
            continue
        if not any(_tolerates(toleration, taint) for toleration in pod.get("tolerations") or []):
            reasons.append(f"taint {taint['key']}={taint['value']}:{taint['effect']}")
    requested = {"pods": Decimal(1), **effective_requests(pod)}
    for resource, amount in requested.items():
        if amount > node.allocatable.get(resource, Decimal(0)):
            reasons.append(f"{resource}: {amount} > {node.allocatable.get(resource, 0)}")
    return reasons


def effective_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """Per resource, the larger of the app containers' sum and the largest init container's
    request (Kubernetes docs, Init Containers, "Resource sharing within containers"; what the
    scheduler's NodeResourcesFit computes). Init containers run one at a time, before the app
    containers, so their requests do not add up."""

    def requests(container: dict[str, Any]) -> dict[str, Decimal]:
        asked = container.get("resources", {}).get("requests", {})
        return {resource: parse_quantity(quantity) for resource, quantity in asked.items()}

    total: dict[str, Decimal] = {}
    for container in pod["containers"]:
        for resource, amount in requests(container).items():
            total[resource] = total.get(resource, Decimal(0)) + amount
    for container in pod.get("initContainers") or []:
        for resource, amount in requests(container).items():
            total[resource] = max(total.get(resource, Decimal(0)), amount)
    return total


def _tolerates(toleration: dict[str, str], taint: dict[str, str]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint["value"]
