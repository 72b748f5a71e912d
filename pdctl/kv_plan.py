"""KV-cache sizing for prefill/decode disaggregation, from a model's Hugging Face config.json.

KV bytes per token follow vLLM 0.26's cache layout (catalog/kv_cache_bytes.py): grouped-query
attention stores K and V per KV head per layer; multi-head latent attention one latent of
kv_lora_rank + qk_rope_head_dim per layer, whole on every TP rank. Weights
(catalog/model_architecture.py) are placed per GPU as vLLM places them under TP, PP, DP and
expert parallel (catalog/expert_placement.py); what they leave of a GPU for the KV cache is
catalog/model_architecture.py gpu_memory, which synth's model rules apply too.

The KV transfer is per GPU: each GPU of a rank holds its share of the request's KV (its heads'
under GQA, the whole latent under MLA) and NIXL moves it over that GPU's own EFA devices
(catalog/efa_layout.py efa_gbps_per_gpu, from NIXL 1.3.1's GPU-to-EFA grouping), all GPUs at
once; the transfer takes as long as one GPU's share over its devices.
"""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from catalog import model_config_file
from catalog.efa_layout import efa_gbps_per_gpu
from catalog.expert_placement import Parallelism
from catalog.instances import GpuInstance
from catalog.model_architecture import ModelShape, UnsupportedModelError, gpu_memory
from catalog.model_config_file import CONFIG_BYTES_MAX
from pdctl.http_call import within
from pdctl.moe_traffic import MoeTraffic, moe_traffic

# Share of EFA's line rate a NIXL READ achieves (NIXL over LIBFABRIC, large blocks).
EFA_EFFICIENCY = 0.7
# Share of one GPU's link to the others of its node (catalog/instances.py gpu_link_gbytes_per_s:
# NVLink, or PCIe Gen4 x16 on G6/G6e) that a NIXL READ over UCX's cuda_ipc achieves on a shared
# node (gpu_nodes.shared). Assumed as EFA's, not measured: a cuda_ipc GET is one copy engine
# transfer per block, no NIC in the path.
IN_NODE_EFFICIENCY = 0.7
# EC2 limits one TCP flow to 10 Gbps inside a cluster placement group (EC2 user guide, "Amazon
# EC2 instance network bandwidth"): the path UCX falls back to on EFA.
TCP_SINGLE_FLOW_GBPS = 10.0
# Model FLOPs utilisation of a prefill pass; published vLLM/SGLang prefill runs reach 0.4-0.6.
PREFILL_MFU = 0.4
# Calibration: DistServe (Zhong et al., OSDI 2024) and Splitwise (Patel et al., ISCA 2024) gain
# from disaggregation when prompts are long enough that prefill interferes with decode, and lose
# it when the KV transfer is no longer small against the prefill it replaces.
MIN_INPUT_TOKENS = 1024
MAX_TRANSFER_SHARE = 0.2


# Hugging Face answers a config download in well under this; a stalled one ends here.
DOWNLOAD_TIMEOUT_SECONDS = 20
# Hugging Face repository ids: `owner/name`, letters, digits, '-', '_', '.', at most 96 each.
HF_MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")


def is_model_id(source: str) -> bool:
    """Only `owner/name` is a model id: what names a file (a .json name, a leading '.', '/' or
    '~', more than one '/', a backslash) or exists here is a path, never downloaded."""
    if Path(source).expanduser().exists():
        return False
    if source.startswith((".", "/", "~")) or source.endswith(".json") or "\\" in source:
        return False
    return HF_MODEL_ID.fullmatch(source) is not None and ".." not in source


def load_model_config(source: str) -> dict[str, Any]:
    """A config.json path (or a model folder holding one), or a Hugging Face model id whose
    config.json is fetched (public models; gated ones need the file downloaded with a token
    first). Raises OSError for what cannot be read and UnsupportedModelError for what is not a
    model config."""
    if is_model_id(source):
        text = _download(source)
    else:
        path = Path(source).expanduser()
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise OSError(f"{source}: no such file (a path; a Hugging Face model id is owner/name)")
        return model_config_file.read_file(path)
    return model_config_file.parse(text)


def _download(model_id: str) -> str:
    url = f"https://huggingface.co/{model_id}/resolve/main/config.json"

    def read() -> bytes:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
            return response.read(CONFIG_BYTES_MAX + 1)

    try:
        data = within(DOWNLOAD_TIMEOUT_SECONDS, read, f"downloading {url}")
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            raise OSError(
                f"{url}: HTTP {error.code}: a gated or private model; download its config.json "
                "with your token and pass the file"
            ) from None
        raise OSError(f"{url}: HTTP {error.code}") from None
    except TimeoutError as error:
        raise OSError(str(error)) from None
    if len(data) > CONFIG_BYTES_MAX:
        raise UnsupportedModelError(f"{url}: larger than {CONFIG_BYTES_MAX:,} bytes")
    return data.decode(errors="replace")


@dataclass(frozen=True)
class KvPlan:
    kv_bytes_per_token: int
    kv_bytes_per_request: int
    transfer_seconds_efa: float
    transfer_seconds_tcp: float
    prefill_seconds: float
    weights_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    max_concurrent_sequences: int  # per replica (DP group) at input + output tokens each
    verdict: str
    pays_off: bool
    weight_precision: str = "none"
    attention: str = "gqa"  # or "mla": one latent per layer
    kv_cache_dtype: str = "auto"
    kv_bytes_per_token_per_gpu: int = 0
    data_parallel: int = 1
    expert_parallel: bool = False
    gpus_per_replica: int = 1  # DP x TP x PP
    nodes_per_replica: int = 1  # of the planned instance type
    experts_per_gpu: float = 0  # routed experts of each MoE layer on the fullest GPU
    expert_weights_bytes_per_gpu: int = 0
    kv_tokens_per_dp_rank: int = 0
    kv_tokens_per_replica: int = 0
    max_model_len: int | None = None
    sequences_at_max_model_len: int | None = None  # per replica (DP group)
    efa_gbps_per_gpu: float = 0  # the EFA share NIXL moves one GPU's KV over
    kv_bytes_per_request_per_gpu: int = 0  # what one GPU moves for one request
    moe: MoeTraffic | None = None  # all-to-all and EPLB traffic of an expert-parallel group
    # What each rank reads from the model files at every (re)start of its group: all of them,
    # or its own experts and the rest where enable_ep_weight_filter applies.
    checkpoint_bytes_read_per_rank: int = 0
    # The path the KV cache takes from prefill to decode: "EFA" between a side's own nodes, or
    # the node's GPU link ("NVLink", "PCIe") on a shared node; its seconds per request, and
    # the GB/s one GPU moves its share over.
    hand_off_path: str = "EFA"
    transfer_seconds_hand_off: float = 0
    hand_off_gbytes_per_s_per_gpu: float = 0

    @property
    def fits(self) -> bool:
        if self.max_model_len is not None and self.kv_tokens_per_dp_rank < self.max_model_len:
            return False
        return self.max_concurrent_sequences >= 1

    def as_dict(self) -> dict[str, Any]:
        body = asdict(self)
        if self.moe is not None:
            body["moe"] = self.moe.as_dict()
        return {**body, "fits": self.fits}


def plan(
    shape: ModelShape,
    instance: GpuInstance,
    *,
    tensor_parallel: int,
    pipeline_parallel: int = 1,
    data_parallel: int = 1,
    expert_parallel: bool = False,
    eplb: bool = False,
    redundant_experts: int = 0,
    input_tokens: int,
    output_tokens: int,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    ep_weight_filter: bool = False,
    in_node: bool = False,
) -> KvPlan:
    """One side's sizing, of a layout the model's rules accepted (app_config/rules/
    model_parallel.py: the plan command applies them first). `ep_weight_filter`:
    the side's ranks read only their own experts at load (serving_manifests/serve_config.py
    reads_only_local_experts decides it from the settings). `in_node`: both sides share each
    node (gpu_nodes.shared), and the KV cache moves over the node's GPU link, each GPU's share
    over its own link, instead of over EFA."""
    parallelism = Parallelism(
        tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel,
        data_parallel=data_parallel,
        expert_parallel=expert_parallel,
        eplb=eplb or redundant_experts > 0,
        redundant_experts=redundant_experts,
    )
    per_request = shape.kv_bytes_per_token * input_tokens
    # Each pipeline stage holds its layers' KV; each rank its heads' share of it (GQA) or the
    # whole latent (MLA). Every GPU of a DP rank holds the same tokens; DP ranks hold their own.
    per_gpu_token = shape.kv_bytes_per_token_per_gpu(tensor_parallel, pipeline_parallel)
    per_gpu_request = per_gpu_token * input_tokens
    gpu_gbps = efa_gbps_per_gpu(instance)
    transfer_efa = per_gpu_request / (gpu_gbps * 1e9 / 8 * EFA_EFFICIENCY)
    transfer_tcp = per_request / (TCP_SINGLE_FLOW_GBPS * 1e9 / 8)
    if in_node:
        path, link_gbytes = instance.gpu_link, float(instance.gpu_link_gbytes_per_s)
        transfer = per_gpu_request / (link_gbytes * 1e9 * IN_NODE_EFFICIENCY)
    else:
        path, link_gbytes, transfer = "EFA", gpu_gbps / 8, transfer_efa
    parts = shape.weight_parts()
    memory = gpu_memory(shape, parallelism, instance.gpu_memory_gib, gpu_memory_utilization)
    weights_per_gpu, kv_budget = memory.weights_bytes, memory.kv_budget_bytes
    tokens_per_rank = kv_budget // per_gpu_token
    sequences = data_parallel * (tokens_per_rank // (input_tokens + output_tokens))
    at_max_len = None if max_model_len is None else tokens_per_rank // max_model_len
    flops = 2 * shape.active_parameters * input_tokens
    prefill = flops / (instance.gpu_bf16_tflops * 1e12 * parallelism.rank_gpus * PREFILL_MFU)
    verdict, pays_off = _verdict(input_tokens, transfer, prefill, sequences)
    if sequences and at_max_len == 0:
        verdict, pays_off = (
            f"does not fit: one DP rank's KV cache holds {tokens_per_rank:,} tokens, fewer "
            f"than max_model_len {max_model_len:,} (vLLM refuses to start)",
            False,
        )
    return KvPlan(
        kv_bytes_per_token=shape.kv_bytes_per_token,
        kv_bytes_per_request=per_request,
        transfer_seconds_efa=transfer_efa,
        transfer_seconds_tcp=transfer_tcp,
        prefill_seconds=prefill,
        weights_bytes_per_gpu=weights_per_gpu,
        kv_budget_bytes_per_gpu=kv_budget,
        max_concurrent_sequences=sequences,
        verdict=verdict,
        pays_off=pays_off,
        weight_precision=shape.precision.method,
        attention="mla" if shape.mla else "gqa",
        kv_cache_dtype=shape.kv_layout.cache_dtype,
        kv_bytes_per_token_per_gpu=per_gpu_token,
        data_parallel=data_parallel,
        expert_parallel=parallelism.uses_expert_parallel,
        gpus_per_replica=parallelism.group_gpus,
        nodes_per_replica=math.ceil(parallelism.group_gpus / instance.gpus),
        experts_per_gpu=parallelism.experts_per_gpu(shape.experts),
        expert_weights_bytes_per_gpu=parts.expert_bytes_per_gpu(parallelism),
        kv_tokens_per_dp_rank=tokens_per_rank,
        kv_tokens_per_replica=data_parallel * tokens_per_rank,
        max_model_len=max_model_len,
        sequences_at_max_model_len=None if at_max_len is None else data_parallel * at_max_len,
        efa_gbps_per_gpu=gpu_gbps,
        kv_bytes_per_request_per_gpu=per_gpu_request,
        moe=moe_traffic(shape, instance, parallelism),
        hand_off_path=path,
        transfer_seconds_hand_off=transfer,
        hand_off_gbytes_per_s_per_gpu=link_gbytes,
        checkpoint_bytes_read_per_rank=shape.checkpoint_bytes_read(
            math.ceil(parallelism.experts_per_gpu(shape.experts)) if ep_weight_filter else None
        ),
    )


def _verdict(
    input_tokens: int, transfer: float, prefill: float, sequences: int
) -> tuple[str, bool]:
    if sequences < 1:
        return (
            "does not fit: weights leave no room for one sequence's KV cache at this layout",
            False,
        )
    share = transfer / prefill if prefill else math.inf
    if share > MAX_TRANSFER_SHARE:
        return (
            f"unlikely to pay off: moving the KV cache takes {share:.0%} of the prefill it "
            "replaces",
            False,
        )
    if input_tokens < MIN_INPUT_TOKENS:
        return (
            f"unlikely to pay off: {input_tokens}-token prompts interfere little with decode; "
            f"disaggregation helps from about {MIN_INPUT_TOKENS} tokens",
            False,
        )
    return f"likely to pay off: KV transfer is {share:.1%} of prefill time", True
