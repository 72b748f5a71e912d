"""One side of the prefill/decode split, seen whole.

A side is configured in two sections, `gpu_nodes.<side>` (the nodes) and `serving.<side>` (the
engine and its Serve replicas), and most of what the app derives needs both: a rank's GPUs
default to a whole node, a replica (a DP group) spans nodes in whole numbers, the labels and
taints come from the node group and are selected by the worker group. Ray Serve LLM itself
holds the two sides as two configs of one type (`prefill_config`, `decode_config`); this is
the app's equivalent, computed once from validated settings and read by the rules, the
renderers, the constructs and `pdctl`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from app_config import engine_options

if TYPE_CHECKING:
    from app_config.model import GpuNodeGroup, NodePlacement
    from app_config.serving import Engine
    from catalog.instances import GpuInstance

Role = Literal["prefill", "decode"]


@dataclass(frozen=True)
class Side:
    role: Role
    nodes: GpuNodeGroup  # gpu_nodes.<role>, or gpu_nodes.shared
    engine: Engine  # serving.<role>
    # The node group's name: the role, or "shared" when both sides run on every node of one
    # group (gpu_nodes.shared), where the side holds `share` GPUs of each node.
    group: str = ""
    share: int | None = None
    # The side's vLLM engine options as its engines get them (serving.engine_options with
    # serving.<role>.engine_options over them, coerced): Serving.engine_options_for.
    options: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.group:
            object.__setattr__(self, "group", self.role)

    @property
    def shared(self) -> bool:
        """Both sides on every node of one group, each on its own GPUs of it."""
        return self.share is not None

    @property
    def instance(self) -> GpuInstance:
        return self.nodes.instance

    @property
    def gpus_per_node(self) -> int:
        """The GPUs of a node that are this side's: all of them, or its share of a shared
        node (gpu_nodes.shared.gpus.<role>)."""
        return self.instance.gpus if self.share is None else self.share

    @property
    def replicas_per_node(self) -> int:
        """Replicas one node holds of this side (a shared node: its share over a replica's
        GPUs); 0 where a replica spans nodes."""
        return self.gpus_per_node // self.replica_gpus

    @property
    def tensor_parallel(self) -> int:
        """TP of one rank; unset means every GPU of one node."""
        return self.engine.tensor_parallel_size or self.gpus_per_node

    @property
    def pipeline_parallel(self) -> int:
        return self.engine.pipeline_parallel_size

    @property
    def data_parallel(self) -> int:
        return self.engine.data_parallel_size

    @property
    def rank_gpus(self) -> int:
        """GPUs of one engine rank (TP x PP): a whole replica unless the side runs DP."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def replica_gpus(self) -> int:
        """GPUs of one Serve replica: its data-parallel ranks times each rank's TP x PP."""
        return self.data_parallel * self.rank_gpus

    @property
    def nodes_per_replica(self) -> int:
        """Nodes one replica (DP group) occupies: Serve places a gang only whole, so node counts
        come in these units."""
        return max(1, -(-self.replica_gpus // self.gpus_per_node))

    @property
    def kv_offload_gib_per_pod(self) -> int:
        """Host memory the side's KV offload tier pins on one node: its size per GPU times the
        side's GPUs of the one worker pod a node runs (the pod holds every GPU of its node;
        on a shared node the other side's GPUs pin the other side's tier)."""
        return self.engine.kv_offload_gib_per_gpu * self.gpus_per_node

    @property
    def weight_offload_gib_per_gpu(self) -> float:
        """Host memory vLLM's UVA weight offload pins per GPU: the engine option
        ``cpu_offload_gb``, 'the space in GiB to offload to CPU, per GPU', held in pinned pages
        (vLLM 0.26 config/offload.py UVAOffloadConfig; model_executor/offloader/uva.py
        ``pin_memory()``), when UVA is the offloader vLLM builds from the options."""
        return float(engine_options.uva_offload_gib(self.options))

    @property
    def pinned_host_mib_per_pod(self) -> int:
        """Host memory the side's engines pin on one node, which the pod's cgroup is charged
        for: the KV offload tier and the weight offload, per GPU, times the side's GPUs of the
        node's one worker pod."""
        per_gpu_gib = self.engine.kv_offload_gib_per_gpu + self.weight_offload_gib_per_gpu
        return math.ceil(per_gpu_gib * 1024 * self.gpus_per_node)

    @property
    def kv_offload_bytes_per_rank(self) -> int:
        """The offload tier of one engine rank, as vLLM 0.26 takes it: ``cpu_bytes_to_use`` is
        the engine's whole buffer, summed over its TP x PP workers (vllm/v1/kv_offload/cpu/
        spec.py CPUOffloadingSpec: ``num_blocks = cpu_bytes_to_use // (bytes per block x
        world_size)``; config/cache.py ``kv_offloading_size``: 'the total buffer size summed
        across all TP ranks')."""
        return self.engine.kv_offload_gib_per_gpu * self.rank_gpus * 2**30

    @property
    def placement(self) -> NodePlacement:
        """The labels and taints of the side's nodes, which its worker group selects."""
        return self.nodes.placement(self.group)

    @property
    def nodes_setting(self) -> str:
        return f"gpu_nodes.{self.group}"

    @property
    def serving_setting(self) -> str:
        return f"serving.{self.role}"


def pinned_host_gib(sides: Iterable[Side]) -> int:
    """Whole GiB a worker pod adds to its memory request for what its sides' engines pin
    (a shared node's pod holds both sides'): the renderer adds it, and the node-fit rules take
    the same figure back out to judge the pod without it."""
    return math.ceil(sum(side.pinned_host_mib_per_pod for side in sides) / 1024)
