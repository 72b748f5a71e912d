"""What each side's engine must fit: its node group's GPUs and sizes (a rank fits one node, a
DP group tiles nodes, the group holds max_replicas whole groups). The engine options' rules are
app_config/rules/engine_options.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app_config.errors import Problem
from app_config.node_labels import GPU_ROLES
from app_config.rules import Rule
from catalog.ray_llm_image import VLLM

if TYPE_CHECKING:
    from app_config.model import Settings


def replica_fit_problems(settings: Settings, role: str) -> list[Problem]:
    """A rank fits one node and tiles it; a DP group tiles a node or fills whole nodes; the node
    group holds max_replicas whole groups and scales in whole groups (Serve's gang placement
    takes a group's GPUs together or not at all, so a node short of a group stays idle)."""
    side = settings.side(role)
    group, engine = side.nodes, side.engine
    gpus, dp = side.gpus_per_node, side.data_parallel
    tp, pp = side.tensor_parallel, side.pipeline_parallel
    setting = f"serving.{role}"
    node = (
        f"the side's share of one {group.instance_type} ({side.nodes_setting}.gpus.{role})"
        if side.shared
        else f"one {group.instance_type}"
    )
    if tp * pp > gpus:
        return [Problem(
            f"{setting}.tensor_parallel_size",
            f"TP {tp} x PP {pp} needs more GPUs than {node} has ({gpus}); "
            "a rank must fit one node (data_parallel_size spreads ranks over nodes)",
            tp,
        )]  # fmt: skip
    if gpus % tp:
        return [Problem(
            f"{setting}.tensor_parallel_size",
            f"TP {tp} does not divide the {gpus} GPUs of {node}: replicas "
            f"would leave GPUs idle; use one of "
            f"{[d for d in range(1, gpus + 1) if gpus % d == 0]} (that also divides the "
            "model's attention heads: model-tensor-parallel-heads)",
            tp,
        )]  # fmt: skip
    group_gpus = side.replica_gpus
    if side.shared and gpus % group_gpus:
        return [Problem(
            f"{setting}.data_parallel_size" if dp > 1 else f"{setting}.tensor_parallel_size",
            f"DP {dp} x TP {tp} x PP {pp} = {group_gpus} GPUs does not divide the side's "
            f"{gpus} GPUs of each shared node ({side.nodes_setting}.gpus.{role}): a replica "
            "must fit the side's share of one node, where the KV hand-off stays inside the "
            f"node; use TP x PP x DP of one of "
            f"{[d for d in range(1, gpus + 1) if gpus % d == 0]}, or give the side more GPUs",
            dp if dp > 1 else tp,
        )]  # fmt: skip
    if dp > 1 and gpus % group_gpus and group_gpus % gpus:
        fitting = [
            n
            for n in range(1, 4 * gpus + 1)
            if (n * tp * pp) % gpus == 0 or gpus % (n * tp * pp) == 0
        ]
        return [Problem(
            f"{setting}.data_parallel_size",
            f"DP {dp} x TP {tp} x PP {pp} = {group_gpus} GPUs neither divides the {gpus} GPUs "
            f"of a {group.instance_type} nor fills whole nodes: the GPUs left over on a node "
            f"could never hold a rank of another group; use one of {fitting[:8]}",
            dp,
        )]  # fmt: skip
    problems = []
    if engine.max_replicas * group_gpus > gpus * group.scaling.max_size:
        problems.append(Problem(
            f"{setting}.max_replicas",
            f"{engine.max_replicas} replicas x {group_gpus} GPUs exceed the GPUs "
            f"{side.nodes_setting} can grow to ({group.scaling.max_size} nodes x {gpus} GPUs"
            f"{f' of {role}' if side.shared else ''}); raise "
            f"{side.nodes_setting}.scaling.max_size or lower max_replicas",
            engine.max_replicas,
        ))  # fmt: skip
    if engine.eplb.enabled and tp * dp <= 1:
        problems.append(Problem(
            f"{setting}.eplb.enabled",
            f"EPLB moves experts between expert-parallel ranks, and TP {tp} x DP {dp} is one "
            f"rank ({VLLM} ParallelConfig: 'EPLB requires tensor, prefill-context, or data "
            "parallelism'); raise data_parallel_size or disable eplb",
            True,
        ))  # fmt: skip
    nodes = side.nodes_per_replica
    if nodes > 1:
        sizes = group.scaling.model_dump() | {
            "reserved_instances": group.capacity.reserved_instances
        }
        for name, count in sizes.items():
            if count is not None and count % nodes:
                place = "capacity" if name == "reserved_instances" else "scaling"
                problems.append(Problem(
                    f"gpu_nodes.{role}.{place}.{name}",
                    f"{count} nodes is not a whole number of DP groups: one {role} replica "
                    f"(DP {dp} x TP {tp} x PP {pp} = {group_gpus} GPUs) spans {nodes} "
                    f"{group.instance_type} nodes, and Serve places a group whole or not at "
                    f"all; use a multiple of {nodes}",
                    count,
                ))  # fmt: skip
    return problems


def every_side_fits(settings: Settings) -> list[Problem]:
    return [problem for role in GPU_ROLES for problem in replica_fit_problems(settings, role)]


def shared_replica_bounds(settings: Settings) -> list[Problem]:
    """On shared nodes each side's replica bounds are the node group's sizes times the
    replicas a node holds of it: a node carries its prefill and its decode replicas together,
    so Serve may never want a replica whose GPUs no node can have (above max_size nodes), nor
    leave a node's share empty at the floor (Ray's autoscaler keeps min_size pods whatever
    Serve wants). Stated in the settings rather than derived, so that serving.<side> reads as
    what Serve is given."""
    problems = []
    for side in settings.sides():
        if not side.shared or side.replicas_per_node < 1:
            continue
        per_node, scaling = side.replicas_per_node, side.nodes.scaling
        for bound, nodes in (
            ("min_replicas", scaling.min_size),
            ("max_replicas", scaling.max_size),
        ):
            given = getattr(side.engine, bound)
            if given != nodes * per_node:
                problems.append(Problem(
                    f"{side.serving_setting}.{bound}",
                    f"{given} replicas, but each shared node holds {per_node} {side.role} "
                    f"replica(s) ({side.gpus_per_node} GPUs of {side.replica_gpus} each) and "
                    f"{side.nodes_setting}.scaling has {bound[:3]}_size {nodes}: both sides' "
                    f"bounds follow the node group, so use {bound} {nodes * per_node}",
                    given,
                ))  # fmt: skip
    return problems


RULES = (
    Rule("replica-fit", frozenset({"serving", "gpu_nodes"}), every_side_fits),
    Rule("shared-replica-bounds", frozenset({"serving", "gpu_nodes"}), shared_replica_bounds),
)
