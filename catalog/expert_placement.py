"""Where a replica's weights sit under tensor, pipeline, data and expert parallel, as vLLM 0.26
places them, so that `pdctl plan` can size one GPU of a DP group.

Sources (vllm-project/vllm v0.26.0):
- vllm/model_executor/layers/fused_moe/config.py `FusedMoEParallelConfig.make`: the MoE layers
  flatten TP across DP (the routed experts are sharded over TP x DP ranks); with
  `enable_expert_parallel` that same TP x DP group becomes the EP group and each rank owns whole
  experts instead (EP size = TP x DP, MoE TP = 1).
- vllm/model_executor/layers/fused_moe/expert_map_manager.py `determine_expert_map`: the
  global experts are dealt out evenly, the first `global % ep` ranks taking one more.
- vllm/model_executor/layers/fused_moe/layer.py: global experts = routed experts +
  `eplb_config.num_redundant_experts`; with EPLB they must divide evenly over the EP ranks;
  redundant experts without EPLB are refused.
- vllm/config/parallel.py `ParallelConfig.__post_init__`: EPLB needs enable_expert_parallel and
  TP x DP > 1 (the configuration's rules: app_config/serving.py,
  app_config/rules/replica_fit.py);
  `use_sequence_parallel_moe` (allgather_reducescatter, EP, TP > 1 and DP > 1):
  then deepseek_v2.py builds the shared experts with `disable_tp`, whole on every rank.
- Attention, dense MLPs, embeddings and lm_head are split by TP within each DP rank and
  replicated across DP ranks; DeepSeek's MLA down-projections (q_a_proj, kv_a_proj_with_mqa) and
  V3.2's indexer are `ReplicatedLinear` (deepseek_v2.py): whole on every rank.
Pipeline stages divide all of it by their layers (approximated as an even split).

What vLLM refuses of a layout for the model (heads over TP, experts for DP and EP, experts over
the EPLB ranks) is the rules layer's (app_config/rules/model_parallel.py): the sizing here takes
a layout those rules accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Parallelism:
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    expert_parallel: bool = False
    eplb: bool = False
    redundant_experts: int = 0

    @property
    def rank_gpus(self) -> int:
        """GPUs of one DP rank (one vLLM engine, one Serve replica)."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def group_gpus(self) -> int:
        """GPUs of one DP group, the unit Serve schedules and restarts."""
        return self.data_parallel * self.rank_gpus

    @property
    def moe_group(self) -> int:
        """Ranks the routed experts are spread over: TP x DP (fused_moe/config.py)."""
        return self.tensor_parallel * self.data_parallel

    @property
    def uses_expert_parallel(self) -> bool:
        return self.expert_parallel and self.moe_group > 1

    @property
    def sequence_parallel_moe(self) -> bool:
        return self.expert_parallel and self.tensor_parallel > 1 and self.data_parallel > 1

    def experts_per_gpu(self, routed_experts: int) -> float:
        """Routed experts on the fullest GPU: whole experts under EP, a 1/(TP x DP) slice of
        each otherwise."""
        if not routed_experts:
            return 0
        if self.uses_expert_parallel:
            return math.ceil((routed_experts + self.redundant_experts) / self.moe_group)
        return routed_experts / self.moe_group


@dataclass(frozen=True)
class WeightParts:
    """A model's weights in bytes, by how vLLM places them."""

    tp_split: float  # attention projections, dense MLPs, embeddings, lm_head
    replicated: float  # whole on every rank (MLA down-projections, V3.2's indexer)
    shared_experts: float
    routed_experts: float  # every routed expert of every MoE layer
    routed_expert_count: int  # routed experts per MoE layer

    @property
    def total(self) -> float:
        return self.tp_split + self.replicated + self.shared_experts + self.routed_experts

    def expert_bytes_per_gpu(self, parallelism: Parallelism) -> int:
        if not self.routed_expert_count:
            return 0
        per_expert = self.routed_experts / self.routed_expert_count
        experts = parallelism.experts_per_gpu(self.routed_expert_count)
        return math.ceil(experts * per_expert / parallelism.pipeline_parallel)

    def bytes_per_gpu(self, parallelism: Parallelism) -> int:
        tp = parallelism.tensor_parallel
        shared_split = 1 if parallelism.sequence_parallel_moe else tp
        rest = self.tp_split / tp + self.replicated + self.shared_experts / shared_split
        return math.ceil(rest / parallelism.pipeline_parallel) + self.expert_bytes_per_gpu(
            parallelism
        )
