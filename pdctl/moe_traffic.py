"""What an expert-parallel DP group sends between its GPUs: the all-to-all every token takes
through every MoE layer, and the expert weights EPLB moves when it rebalances. `pdctl plan`
prints both, so that a group inside one node (NVLink only) and a group across nodes (EFA
between them) can be compared before deploy.

Sources (vllm-project/vllm v0.26.0):
- distributed/device_communicators/all2all.py `AgRsAll2AllManager` (`allgather_reducescatter`,
  the one backend that runs over EFA here: catalog/expert_parallel.py): `dispatch` all-gathers
  every DP rank's hidden states with their top-k weights and ids to every rank of the group
  (`all_gatherv`), and `combine` reduce-scatters the experts' outputs back (`reduce_scatterv`):
  dense, every token to every rank, whatever its experts. fused_moe/prepare_finalize/
  naive_dp_ep.py `prepare` may quantize the hidden states before the gather; sized here in the
  model's dtype, an upper bound.
- distributed/eplb/eplb_state.py `EplbState.rearrange`: without use_async (this app pins
  `use_async: false`, catalog/expert_parallel.py EPLB_CONFIG_ON_EFA) it calls
  rebalance_execute.py `rearrange_expert_weights_inplace`, which loops over every MoE layer,
  sending and receiving the experts whose placement changed (`move_to_buffer`, `move_from_buffer`)
  inside the engine step: every rank of the group waits until the last layer has moved. At most
  each rank replaces every expert it holds; the moves from ranks on other nodes cross EFA.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from catalog.efa_layout import efa_gbps_per_gpu

if TYPE_CHECKING:
    from catalog.expert_placement import Parallelism
    from catalog.instances import GpuInstance
    from catalog.model_architecture import ModelShape

# Bytes of one token's top-k routing in the gather: a float32 weight and an int32 expert id per
# routed expert (fused_moe/router: topk_weights float32, topk_ids int32).
ROUTING_BYTES_PER_EXPERT = 4 + 4
# Share of the link a large NCCL collective or batched send/receive achieves (as kv_plan's
# EFA_EFFICIENCY for NIXL READs).
LINK_EFFICIENCY = 0.7


@dataclass(frozen=True)
class MoeTraffic:
    """One expert-parallel DP group's network traffic, per token and per rebalance."""

    ranks: int  # DP ranks exchanging tokens
    nodes: int
    bytes_per_token: int  # delivered to other ranks, all MoE layers, dispatch + combine
    efa_bytes_per_token: int  # of which at least this much crosses EFA between nodes
    nvlink_bytes_per_token: int
    eplb_bytes_per_rank: int = 0  # the most one rank receives in one rebalance
    eplb_efa_bytes_per_rank: int = 0  # of it, from ranks on other nodes
    eplb_stall_seconds: float = 0.0  # every rank of the group waits this long

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def moe_traffic(
    shape: ModelShape, instance: GpuInstance, parallelism: Parallelism
) -> MoeTraffic | None:
    """None unless the model routes to experts over more than one expert-parallel DP rank."""
    ranks = parallelism.data_parallel
    if not (shape.moe_layers and parallelism.uses_expert_parallel and ranks > 1):
        return None
    nodes = math.ceil(parallelism.group_gpus / instance.gpus)
    hidden = shape.hidden_size * shape.dtype_bytes
    dispatch = hidden + shape.experts_per_token * ROUTING_BYTES_PER_EXPERT
    combine = hidden
    per_layer = dispatch + combine
    delivered = per_layer * (ranks - 1) * shape.moe_layers
    # Every token's dispatch reaches each other node at least once, and its combine brings at
    # least one (already reduced) partial sum back from each: the least any NCCL algorithm can
    # move between nodes. The rest goes GPU to GPU inside a node.
    efa = per_layer * (nodes - 1) * shape.moe_layers
    traffic = MoeTraffic(
        ranks=ranks,
        nodes=nodes,
        bytes_per_token=delivered,
        efa_bytes_per_token=efa,
        nvlink_bytes_per_token=delivered - efa,
    )
    if not parallelism.eplb:
        return traffic
    eplb = shape.weight_parts().expert_bytes_per_gpu(parallelism)
    ranks_per_node = min(ranks, instance.gpus // parallelism.rank_gpus)
    remote_share = (ranks - ranks_per_node) / (ranks - 1)
    eplb_efa = math.ceil(eplb * remote_share)
    # Each GPU receives over its own EFA devices and from its node's GPUs over NVLink at the same
    # time; the slower path decides. aws-ofi-nccl groups NICs per GPU as NIXL does (aws/aws-ofi-
    # nccl src/nccl_ofi_topo.cpp `nccl_ofi_topo_group`: each GPU walks up to its nearest
    # NIC-bearing PCIe ancestor, one group of NICs per GPU, exposed to NCCL as one device).
    efa_seconds = eplb_efa / (efa_gbps_per_gpu(instance) * 1e9 / 8 * LINK_EFFICIENCY)
    link_seconds = (eplb - eplb_efa) / (instance.gpu_link_gbytes_per_s * 1e9 * LINK_EFFICIENCY)
    return MoeTraffic(
        **{
            **asdict(traffic),
            "eplb_bytes_per_rank": eplb,
            "eplb_efa_bytes_per_rank": eplb_efa,
            "eplb_stall_seconds": max(efa_seconds, link_seconds),
        }
    )
