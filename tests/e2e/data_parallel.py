"""What a data-parallel rank of the stand-in engine checks and records (standin_engine.py).

Ray 2.58's DPServer (ray/llm/_internal/serve/serving_patterns/data_parallel/dp_server.py) gives
each rank of a gang ``data_parallel_rank``, ``data_parallel_address`` and
``data_parallel_rpc_port`` (rank 0's, read from the GCS KV store) in its engine kwargs, and
``VLLM_RAY_BUNDLE_INDICES``: the rank's share of the gang placement group, sorted so that one
node's bundles are adjacent and rank 0's node comes first. VLLMEngine then builds vLLM's
``AsyncEngineArgs`` from the kwargs (ray .../engines/vllm/vllm_engine.py,
``_get_vllm_engine_config``) and vLLM turns them into a ``ParallelConfig``
(vllm 0.26 engine/arg_utils.py ``create_engine_config``). The stand-in does the same two steps
with vLLM's own classes, without the model config (nothing is downloaded), and refuses what vLLM
would refuse.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

BUNDLE_INDICES_ENV = "VLLM_RAY_BUNDLE_INDICES"


def _vllm_parallel_config(engine_config: Any) -> Any:
    """vLLM's ParallelConfig for these engine kwargs, as create_engine_config builds it when
    data_parallel_rank is given (external load balancing: one engine per rank, one local
    rank). The model is taken to be a mixture of experts: vLLM refuses external data parallel
    for a dense model ("Non-MoE models do not support external data parallel mode")."""
    from ray.llm._internal.serve.engines.vllm.vllm_engine import _normalize_vllm_engine_kwargs
    from vllm.config.parallel import ParallelConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform

    kwargs = _normalize_vllm_engine_kwargs(engine_config.get_initialization_kwargs())
    # No weights: a local folder stands for the model, else AsyncEngineArgs looks the id up in
    # the (offline) Hugging Face cache.
    kwargs["model"] = tempfile.gettempdir()
    args = AsyncEngineArgs(**kwargs)  # unknown or mistyped arguments fail here, as in VLLMEngine
    external = args.data_parallel_external_lb or args.data_parallel_rank is not None
    if external and args.data_parallel_size_local not in (1, None):
        raise ValueError(
            "data_parallel_size_local must be 1 or None when data_parallel_rank is set"
        )
    fields = dict(
        pipeline_parallel_size=args.pipeline_parallel_size,
        tensor_parallel_size=args.tensor_parallel_size,
        data_parallel_size=args.data_parallel_size,
        data_parallel_rank=args.data_parallel_rank or 0,
        data_parallel_external_lb=external,
        data_parallel_size_local=1 if external else args.data_parallel_size,
        data_parallel_master_ip=args.data_parallel_address or "127.0.0.1",
        data_parallel_rpc_port=args.data_parallel_rpc_port or 29550,
        data_parallel_backend=args.data_parallel_backend,
        is_moe_model=True,
        enable_expert_parallel=args.enable_expert_parallel,
        all2all_backend=args.all2all_backend,
        enable_eplb=args.enable_eplb,
        eplb_config=args.eplb_config,
        distributed_executor_backend=args.distributed_executor_backend,
    )
    # EPLB's first check is for a CUDA (or ROCm) device; the stand-in stands for a GPU node, so
    # that check alone answers as on one. Every other rule is vLLM's, unchanged.
    original = current_platform.is_cuda_alike
    current_platform.is_cuda_alike = lambda: True  # type: ignore[method-assign]
    try:
        return ParallelConfig(**fields)
    finally:
        current_platform.is_cuda_alike = original  # type: ignore[method-assign]


def data_parallel_record(engine_config: Any) -> dict[str, Any] | None:
    """The rank's view of its gang, or None for an engine without data parallelism. Runs in
    the replica, after DPServer set the rank's kwargs and bundle indices."""
    kwargs = engine_config.engine_kwargs
    if int(kwargs.get("data_parallel_size", 1)) <= 1:
        return None
    import ray
    from ray import serve
    from ray.experimental.internal_kv import _internal_kv_get
    from ray.llm._internal.serve.serving_patterns.data_parallel.dp_server import (
        GangMasterInfoRegistry,
    )
    from ray.util.placement_group import get_placement_group, placement_group_table

    parallel = _vllm_parallel_config(engine_config)
    gang = serve.get_replica_context().gang_context
    if gang is None:
        raise RuntimeError("data_parallel_size > 1 outside a gang: Serve did not gang-schedule")
    table = placement_group_table(get_placement_group(gang.pg_name))
    bundles = [int(index) for index in os.environ[BUNDLE_INDICES_ENV].split(",")]
    eplb = parallel.eplb_config
    # What rank 0 registered for its gang (address, port and node), as every rank read it.
    master = json.loads(_internal_kv_get(GangMasterInfoRegistry._make_key(gang.gang_id)))
    return {
        "rank": parallel.data_parallel_rank,
        "size": parallel.data_parallel_size,
        "address": parallel.data_parallel_master_ip,
        "rpc_port": parallel.data_parallel_rpc_port,
        "world_size_across_dp": parallel.world_size_across_dp,
        "expert_parallel": parallel.enable_expert_parallel,
        "all2all_backend": parallel.all2all_backend,
        "eplb": {
            "enabled": parallel.enable_eplb,
            "communicator": eplb.communicator,
            "use_async": eplb.use_async,
            "num_redundant_experts": eplb.num_redundant_experts,
        }
        if parallel.enable_eplb
        else None,
        "master": master,
        "gang_id": gang.gang_id,
        "gang_rank": gang.rank,
        "gang_world_size": gang.world_size,
        "gang_members": list(gang.member_replica_ids),
        "placement_group": gang.pg_name,
        "strategy": table["strategy"],
        "bundle_indices": bundles,
        "bundle_nodes": {index: table["bundles_to_node_id"][index] for index in bundles},
        "bundle_count": len(table["bundles"]),
        "node_id": ray.get_runtime_context().get_node_id(),
    }
