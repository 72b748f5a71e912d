"""What runs on a node group fits its nodes: the requests of every pod placed there (the app's
own, read from the renderer, and the DaemonSets and operators of the add-ons and charts it
installs) against the node's allocatable (catalog/node_allocatable.py).

A pod whose requests exceed every node's allocatable stays Pending for good: the scheduler's
NodeResourcesFit filter refuses it, and the Cluster Autoscaler, whose template node has the
same allocatable, never adds a node for it. A Ray worker that cannot schedule is a side that
never serves; a Ray head that cannot is no cluster at all.

- GPU nodes: one Ray worker pod per node (it takes every GPU and EFA device), plus the
  DaemonSets that select GPU nodes. A pod's requests are the larger of its app containers' sum
  and its largest init container (KubeRay 1.7 appends wait-gcs-ready, 200m / 256Mi: common/
  pod.go; below the Ray container's). Its huge pages are pre-allocated on the node and leave
  allocatable memory. What a side's engines pin in host memory (its KV offload tier,
  serving.<side>.kv_offload_gib_per_gpu, and vLLM's weight offload, the engine option
  cpu_offload_gb) is part of its worker's memory request; node-fit judges the pod without it,
  kv-offload-fit the tier on top and weight-offload-fit the weight offload on top of both, so
  an offload too large is one finding at its own setting.
- System nodes: the Ray head with its autoscaler sidecar (KubeRay puts the sidecar in the head
  pod) must fit one node beside the DaemonSets; the head and the operators together must fit
  the group at max_size. During a NewCluster upgrade KubeRay runs a second Ray cluster, so a
  second head, until the switch.

Memory is judged twice. Against the nominal memory (an upper bound) a misfit is certain: an
error. Against the memory the kernel is expected to report (catalog/node_allocatable.py,
VM_MEMORY_OVERHEAD) it is likely: a warning that names the margin.

The renderers sit above this layer (catalog <- app_config <- serving_manifests), so the
renderer is imported where the rule runs: the rule judges exactly what synth renders, and no
request is written twice.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app_config.errors import Finding
from app_config.rules import WARNING, Rule
from app_config.side import pinned_host_gib
from catalog.cluster_pods import DAEMON_SETS, DEPLOYMENTS, ClusterPod
from catalog.instances import CATALOG, is_p_class
from catalog.node_allocatable import Allocatable, node_allocatable

if TYPE_CHECKING:
    from app_config.model import Settings
    from app_config.side import Side

_QUANTITY = re.compile(r"^(?P<number>\d+(\.\d+)?)(?P<unit>m|Ki|Mi|Gi|Ti)?$")
_MIB = {None: 2**-20, "Ki": 2**-10, "Mi": 1, "Gi": 2**10, "Ti": 2**20}
# The renderer reads region and prefix too (the image address, the names).
_READS = frozenset(
    {"serving", "gpu_nodes", "cluster", "observability", "region", "prefix", "account"}
)


@dataclass(frozen=True)
class Requests:
    cpu_millis: int = 0
    memory_mib: int = 0
    hugepages_mib: int = 0

    def __add__(self, other: Requests) -> Requests:
        return Requests(
            self.cpu_millis + other.cpu_millis,
            self.memory_mib + other.memory_mib,
            self.hugepages_mib + other.hugepages_mib,
        )

    def times(self, count: int) -> Requests:
        return Requests(
            self.cpu_millis * count, self.memory_mib * count, self.hugepages_mib * count
        )


def _cpu_millis(quantity: str) -> int:
    match = _QUANTITY.fullmatch(str(quantity))
    if not match:
        raise ValueError(f"CPU quantity {quantity!r} is not one this rule reads")
    number = float(match["number"])
    return int(number if match["unit"] == "m" else number * 1000)


def _mib(quantity: str) -> int:
    match = _QUANTITY.fullmatch(str(quantity))
    if not match or match["unit"] == "m":
        raise ValueError(f"memory quantity {quantity!r} is not one this rule reads")
    return int(float(match["number"]) * _MIB[match["unit"]])


def container_requests(container: dict[str, Any]) -> Requests:
    """A container's requests; limits where it states no requests (Kubernetes copies them)."""
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return Requests(
        _cpu_millis(asked["cpu"]) if "cpu" in asked else 0,
        _mib(asked["memory"]) if "memory" in asked else 0,
        _mib(asked["hugepages-2Mi"]) if "hugepages-2Mi" in asked else 0,
    )


def pod_requests(spec: dict[str, Any], *sidecars: dict[str, Any]) -> Requests:
    """The scheduler's view (NodeResourcesFit): per resource, the larger of the app containers'
    sum and the largest init container."""
    total = Requests()
    for container in [*spec["containers"], *sidecars]:
        total += container_requests(container)
    for init in spec.get("initContainers") or []:
        asked = container_requests(init)
        total = Requests(
            max(total.cpu_millis, asked.cpu_millis),
            max(total.memory_mib, asked.memory_mib),
            max(total.hugepages_mib, asked.hugepages_mib),
        )
    return total


@dataclass(frozen=True)
class RenderedPods:
    head: Requests
    workers: dict[str, Requests]  # by worker group (a side's, or the shared nodes')


# The last settings rendered and their pods: the four node-fit rules of one evaluation ask for
# the same object's pods one after the other, and rendering the Ray cluster is the costliest
# step of validation. Held by identity (settings are not hashable); the strong reference keeps
# the id from being reused while the entry stands.
_last_rendered: tuple[Settings, RenderedPods | None] | None = None


def rendered_pods(settings: Settings) -> RenderedPods | None:
    """The Ray head's and each side's worker pod's requests, as the renderer writes them."""
    global _last_rendered
    if _last_rendered is None or _last_rendered[0] is not settings:
        _last_rendered = (settings, _render_pods(settings))
    return _last_rendered[1]


def _render_pods(settings: Settings) -> RenderedPods | None:
    from serving_manifests.rayservice import render_rayservice
    from serving_manifests.serve_extensions import render_serve_extensions

    # The image's address (which names the account where serving.image_cache is on) does not
    # change a request; the stack passes a CloudFormation token in the same place. Nor does the
    # Serve config: the renderer writes it as the serveConfigV2 text and hashes it into an
    # annotation, neither of them a request, so it is left empty here. Rendering it and dumping
    # it as YAML was most of this rule's time, and this rule most of a valid configuration's
    # validation (tests/config/test_node_fit.py holds the pods to a full render's, for every
    # configuration).
    try:
        service = render_rayservice(
            settings, {}, render_serve_extensions(settings), account="ACCOUNT"
        )
    except (KeyError, ValueError):
        return None  # what the renderer cannot render (a region without the image) has its rule
    return pods_of(service)


def pods_of(service: dict[str, Any]) -> RenderedPods:
    """The requests of a rendered RayService's head and worker pods."""
    cluster = service["spec"]["rayClusterConfig"]
    autoscaler = {"resources": cluster["autoscalerOptions"].get("resources") or {}}
    head = pod_requests(cluster["headGroupSpec"]["template"]["spec"], autoscaler)
    workers = {
        group["groupName"]: pod_requests(group["template"]["spec"])
        for group in cluster["workerGroupSpecs"]
    }
    return RenderedPods(head, workers)


def _applies(pod: ClusterPod, settings: Settings, instance_type: str) -> bool:
    if pod.only_when == "container_logs":
        return settings.observability.container_logs
    if pod.only_when == "p_class":
        return instance_type in CATALOG and is_p_class(CATALOG[instance_type])
    return True


def daemon_sets(settings: Settings, instance_type: str, gpu: bool) -> list[ClusterPod]:
    """The DaemonSets that run on one node of this group."""
    wanted = ("every", "gpu") if gpu else ("every",)
    return [
        pod
        for pod in DAEMON_SETS
        if pod.placement in wanted and _applies(pod, settings, instance_type)
    ]


def _requests(pods: list[ClusterPod]) -> Requests:
    total = Requests()
    for pod in pods:
        total += Requests(pod.cpu_millis, pod.memory_mib).times(pod.replicas)
    return total


def _shortfalls(asked: Requests, pods: int, node: Allocatable, nodes: int = 1) -> list[str]:
    """Which resource a set of pods over ``nodes`` nodes exceeds, with the figures."""
    short = []
    if asked.cpu_millis > node.cpu_millis * nodes:
        short.append(f"CPU {asked.cpu_millis}m > {node.cpu_millis * nodes}m allocatable")
    if asked.memory_mib > node.memory_mib * nodes:
        short.append(f"memory {asked.memory_mib} MiB > {node.memory_mib * nodes} MiB allocatable")
    if pods > node.max_pods * nodes:
        short.append(f"{pods} pods > maxPods {node.max_pods * nodes}")
    return short


def _allocatable_note(node: Allocatable) -> str:
    return (
        f"one {node.instance_type} node ({node.vcpus} vCPUs, {node.memory_gib} GiB) offers "
        f"{node.cpu_millis}m CPU, {node.memory_mib} MiB and {node.max_pods} pods after the "
        f"AL2023 AMI's kube-reserved ({node.kube_reserved_cpu_millis}m, "
        f"{node.kube_reserved_memory_mib} MiB) and eviction threshold"
    )


def _thin_memory(asked: Requests, node: Allocatable, nodes: int = 1) -> bool:
    return node.memory_mib * nodes >= asked.memory_mib > node.memory_mib_estimated * nodes


def _without_offload(worker: Requests, settings: Settings, group: str) -> Requests:
    """The worker pod's requests before what its engines pin in host memory is added (a shared
    node's pod holds both sides'): what the instance type must hold (node-fit); the offloads
    on top are judged by kv-offload-fit and weight-offload-fit."""
    offload_mib = pinned_host_gib(s for s in settings.sides() if s.group == group) * 1024
    return Requests(worker.cpu_millis, worker.memory_mib - offload_mib, worker.hugepages_mib)


def _one_side_per_pod(settings: Settings) -> list[Side]:
    """A side for each worker pod: both sides, or the first of a shared node's pod."""
    sides: dict[str, Side] = {}
    for side in settings.sides():
        sides.setdefault(side.group, side)
    return list(sides.values())


def gpu_nodes_fit(settings: Settings) -> Iterator[Finding]:
    pods = rendered_pods(settings)
    if pods is None:
        return
    for side in _one_side_per_pod(settings):
        instance_type = side.nodes.instance_type
        worker = _without_offload(pods.workers[side.group], settings, side.group)
        node = node_allocatable(instance_type, hugepages_mib=worker.hugepages_mib)
        if node is None:
            continue  # every GPU type of the catalog has ENI limits (tests check it)
        daemons = daemon_sets(settings, instance_type, gpu=True)
        asked = worker + _requests(daemons)
        short = _shortfalls(asked, 1 + len(daemons), node)
        if short:
            yield Finding(
                f"{side.nodes_setting}.instance_type",
                f"the {side.group} Ray worker pod ({worker.cpu_millis}m CPU, "
                f"{worker.memory_mib} MiB) and {len(daemons)} DaemonSets do not fit one node: "
                f"{'; '.join(short)}; {_allocatable_note(node)}. The pod would stay Pending "
                "and the Cluster Autoscaler would add no node for it",
                instance_type,
            )


def _offload_room(settings: Settings, side: Side) -> tuple[Allocatable, int] | None:
    """The node a side's worker pod runs on and the MiB of its allocatable memory left beside
    the pod's requests without its pinned offloads and the GPU DaemonSets; None where the pod
    does not fit without them (node-fit says so) or the type is not in the catalog."""
    pods = rendered_pods(settings)
    if pods is None:
        return None
    worker = pods.workers[side.group]
    node = node_allocatable(side.nodes.instance_type, hugepages_mib=worker.hugepages_mib)
    if node is None:
        return None
    others = _without_offload(worker, settings, side.group) + _requests(
        daemon_sets(settings, side.nodes.instance_type, gpu=True)
    )
    room_mib = node.memory_mib - others.memory_mib
    return (node, room_mib) if room_mib >= 0 else None


def kv_offload_fit(settings: Settings) -> Iterator[Finding]:
    """A side's KV offload tier (serving.<side>.kv_offload_gib_per_gpu) must fit the node's
    allocatable memory beside the worker pod's other requests and the DaemonSets: the renderer
    adds it to the pod's memory request and limit (vLLM pins it in the engine's workers, and the
    pod's cgroup is charged for pinned pages), so a tier too large leaves the pod Pending like
    any other misfit. Judged only where the pod fits without it (else node-fit says so)."""
    for side in settings.sides():
        tier_gib = side.engine.kv_offload_gib_per_gpu
        room = _offload_room(settings, side) if tier_gib else None
        if room is None:
            continue
        node, room_mib = room
        gpus = side.gpus_per_node
        offload_mib = tier_gib * gpus * 1024
        if offload_mib <= room_mib:
            continue
        yield Finding(
            f"{side.serving_setting}.kv_offload_gib_per_gpu",
            f"{tier_gib} GiB x {gpus} GPUs = {offload_mib} MiB of pinned host memory does not "
            f"fit one {side.nodes.instance_type} node: {node.memory_mib} MiB allocatable, of "
            f"which the {side.role} worker pod's other requests and the DaemonSets take "
            f"{node.memory_mib - room_mib} MiB, leaving {room_mib} MiB. The pod's memory "
            "request grows by the tier, so it would stay Pending; use at most "
            f"{room_mib // (1024 * gpus)} GiB per GPU",
            tier_gib,
        )


def weight_offload_fit(settings: Settings) -> Iterator[Finding]:
    """vLLM's weight offload (the engine option cpu_offload_gb, GiB per GPU) is pinned host
    memory like the KV offload tier, and the renderer adds it to the worker pod's memory request
    the same way (in whole GiB, with the rest of what the pod's engines pin), so it must fit the
    node beside the pod's other requests, the DaemonSets and the KV tiers. Judged only where
    the tiers fit without it (else kv-offload-fit says so)."""
    for side in settings.sides():
        weights_gib = side.weight_offload_gib_per_gpu
        room = _offload_room(settings, side) if weights_gib else None
        if room is None:
            continue
        node, room_mib = room
        pod_sides = [each for each in settings.sides() if each.group == side.group]
        if pinned_host_gib(pod_sides) * 1024 <= room_mib:
            continue
        gpus = side.gpus_per_node
        # The KV tier of this side and what the pod's other side pins (a shared node's pod).
        others_mib = side.engine.kv_offload_gib_per_gpu * gpus * 1024 + sum(
            each.pinned_host_mib_per_pod for each in pod_sides if each.role != side.role
        )
        left_mib = room_mib // 1024 * 1024 - others_mib
        if left_mib < 0:
            continue
        yield Finding(
            settings.serving.engine_option_path(side.role, "cpu_offload_gb"),
            f"{weights_gib:g} GiB x {gpus} GPUs of weights offloaded to pinned host memory do "
            f"not fit one {side.nodes.instance_type} node: {node.memory_mib} MiB allocatable, "
            f"of which the {side.role} worker pod's other requests, the DaemonSets and the KV "
            f"offload tiers take {node.memory_mib - left_mib} MiB, leaving {left_mib} MiB. The "
            "pod's memory request grows by the offload, so it would stay Pending; use at most "
            f"{math.floor(left_mib / gpus / 1024 * 10) / 10:g} GiB per GPU",
            weights_gib,
        )


def gpu_nodes_headroom(settings: Settings) -> Iterator[Finding]:
    pods = rendered_pods(settings)
    if pods is None:
        return
    for side in _one_side_per_pod(settings):
        instance_type = side.nodes.instance_type
        worker = pods.workers[side.group]
        node = node_allocatable(instance_type, hugepages_mib=worker.hugepages_mib)
        if node is None:
            continue
        asked = worker + _requests(daemon_sets(settings, instance_type, gpu=True))
        if _thin_memory(asked, node):
            yield _thin_finding(f"{side.nodes_setting}.instance_type", asked, node, 1)


def _thin_finding(path: str, asked: Requests, node: Allocatable, nodes: int) -> Finding:
    return Finding(
        path,
        f"the pods placed here request {asked.memory_mib} MiB, within the "
        f"{node.memory_mib * nodes} MiB that {nodes} {node.instance_type} node(s) offer by "
        "nominal memory but above the "
        f"{node.memory_mib_estimated * nodes} MiB expected once the kernel's share is gone "
        "(Karpenter's 7.5 % estimate): a node may report too little and leave a pod Pending. "
        "Check `kubectl describe node` on a running node, or choose a larger instance type",
        node.instance_type,
    )


def system_nodes_fit(settings: Settings) -> Iterator[Finding]:
    system = settings.cluster.system_nodes
    node = node_allocatable(system.instance_type)
    pods = rendered_pods(settings)
    if node is None or pods is None:
        return
    daemons = daemon_sets(settings, system.instance_type, gpu=False)
    on_one = pods.head + _requests(daemons)
    short = _shortfalls(on_one, 1 + len(daemons), node)
    if short:
        yield Finding(
            "cluster.system_nodes.instance_type",
            f"the Ray head pod with its autoscaler sidecar ({pods.head.cpu_millis}m CPU, "
            f"{pods.head.memory_mib} MiB) and {len(daemons)} DaemonSets do not fit one node: "
            f"{'; '.join(short)}; {_allocatable_note(node)}. Choose a larger system instance "
            "type (e.g. m7i.2xlarge)",
            system.instance_type,
        )
        return
    nodes = system.scaling.max_size
    asked = pods.head + _requests(list(DEPLOYMENTS)) + _requests(daemons).times(nodes)
    count = 1 + sum(pod.replicas for pod in DEPLOYMENTS) + len(daemons) * nodes
    short = _shortfalls(asked, count, node, nodes)
    if short:
        yield Finding(
            "cluster.system_nodes.scaling.max_size",
            f"the Ray head, the operators and CoreDNS do not fit {nodes} {system.instance_type} "
            f"nodes: {'; '.join(short)}; {_allocatable_note(node)}. Raise max_size or choose a "
            "larger system instance type",
            nodes,
        )


def system_nodes_never_empty(settings: Settings) -> Iterator[Finding]:
    """The Cluster Autoscaler the app installs runs on the system nodes (its nodeSelector is the
    system role, constructs/cluster/cluster_autoscaler.py): a system group at 0 nodes has no
    autoscaler to add one, and CoreDNS, the operators and the Ray head stay Pending for good.
    An owner's autoscaler (cluster.existing) runs where the owner put it, and may scale the
    group from zero."""
    existing = settings.cluster.existing
    if existing is not None and not existing.addons.installs("cluster_autoscaler"):
        return
    scaling = settings.cluster.system_nodes.scaling
    if scaling.min_size < 1:
        yield Finding(
            "cluster.system_nodes.scaling.min_size",
            "is 0, but the Cluster Autoscaler the app installs runs on the system nodes: once "
            "the group is at 0 nothing can scale it up, and CoreDNS, the operators and the Ray "
            "head stay Pending. Use at least 1 (2 keep CoreDNS and the operators available "
            "through a node's replacement)",
            scaling.min_size,
        )


def system_nodes_unchecked(settings: Settings) -> Iterator[Finding]:
    system = settings.cluster.system_nodes
    if node_allocatable(system.instance_type) is None:
        yield Finding(
            "cluster.system_nodes.instance_type",
            "is not in the catalog of node sizes (catalog/node_allocatable.py: the m, c and r "
            "families of generations 5 to 8): synth did not check that the Ray head and the "
            "operators fit its nodes",
            system.instance_type,
        )


def system_nodes_headroom(settings: Settings) -> Iterator[Finding]:
    system = settings.cluster.system_nodes
    node = node_allocatable(system.instance_type)
    pods = rendered_pods(settings)
    if node is None or pods is None:
        return
    daemons = daemon_sets(settings, system.instance_type, gpu=False)
    nodes = system.scaling.max_size
    heads = 2 if settings.serving.upgrade_strategy == "NewCluster" else 1
    asked = pods.head.times(heads) + _requests(list(DEPLOYMENTS)) + _requests(daemons).times(nodes)
    if heads == 2 and _shortfalls(asked, 0, node, nodes):
        yield Finding(
            "cluster.system_nodes.scaling.max_size",
            f"a NewCluster upgrade runs a second Ray head ({pods.head.cpu_millis}m CPU, "
            f"{pods.head.memory_mib} MiB) until the switch, and with it the system pods exceed "
            f"{nodes} {system.instance_type} nodes ({'; '.join(_shortfalls(asked, 0, node, nodes))}"
            "): the new cluster's head would stay Pending and the upgrade never finish. Raise "
            "max_size or choose a larger system instance type",
            nodes,
        )
    elif _thin_memory(pods.head + _requests(daemons), node):
        yield _thin_finding(
            "cluster.system_nodes.instance_type", pods.head + _requests(daemons), node, 1
        )


RULES = (
    Rule("node-fit", _READS, lambda s: [*gpu_nodes_fit(s), *system_nodes_fit(s)]),
    Rule(
        "node-fit-headroom",
        _READS,
        lambda s: [*gpu_nodes_headroom(s), *system_nodes_headroom(s)],
        WARNING,
    ),
    Rule("node-fit-unchecked", _READS, system_nodes_unchecked, WARNING),
    Rule("system-nodes-empty", frozenset({"cluster"}), system_nodes_never_empty),
    Rule("kv-offload-fit", _READS, kv_offload_fit),
    Rule("weight-offload-fit", _READS, weight_offload_fit),
)
