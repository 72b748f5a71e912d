"""KV-cache sizing for prefill/decode disaggregation, from a model's Hugging Face config.json.

KV bytes per token follow vLLM 0.26's cache layout (kv_cache_bytes.py): grouped-query attention
stores K and V per KV head per layer; multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2:
kv_lora_rank) one latent of kv_lora_rank + qk_rope_head_dim per layer, whole on every TP rank.
Weights are sized at the precision the checkpoint's quantization_config gives each kind of layer
(weight_precision.py) and placed per GPU as vLLM places them under TP, PP, DP and expert
parallel (expert_placement.py). Sliding-window layers are counted at full length (an upper
bound); DeepSeek's multi-token-prediction layer (num_nextn_predict_layers) is loaded only for
speculative decoding and not counted.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from catalog.instances import GpuInstance
from pdctl.expert_placement import Parallelism, WeightParts
from pdctl.http_call import within
from pdctl.kv_cache_bytes import CacheLayoutError, KvLayout, gqa_layout, mla_layout
from pdctl.weight_precision import UNQUANTIZED, QuantizationError, WeightPrecision, weight_precision

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "fp8": 1}

# Share of EFA's line rate a NIXL READ achieves (NIXL over LIBFABRIC, large blocks).
EFA_EFFICIENCY = 0.7
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


class UnsupportedModelError(ValueError):
    """The config describes an attention layout this estimate cannot size."""


@dataclass(frozen=True)
class MlaDims:
    """Multi-head latent attention's projection sizes (DeepSeek-V2/V3/R1, Kimi K2)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None  # None: one q_proj instead of q_a_proj + q_b_proj
    indexer_weights: int = 0  # DeepSeek-V3.2's sparse-attention indexer, per layer


@dataclass(frozen=True)
class ModelShape:
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int  # dense MLP layers
    vocab_size: int
    tied_embeddings: bool
    experts: int  # routed experts per MoE layer
    experts_per_token: int
    dtype_bytes: int
    precision: WeightPrecision = field(default=UNQUANTIZED)
    moe_layers: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # all shared experts of a MoE layer together
    mla: MlaDims | None = None
    kv: KvLayout | None = None  # default: GQA in the model's dtype

    @property
    def kv_layout(self) -> KvLayout:
        return self.kv or gqa_layout(
            layers=self.layers,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            cache_dtype="auto",
            model_dtype_bytes=self.dtype_bytes,
        )

    @property
    def kv_bytes_per_token(self) -> int:
        return self.kv_layout.bytes_per_token

    def kv_bytes_per_token_per_gpu(self, tensor_parallel: int, pipeline_parallel: int = 1) -> int:
        """Each rank holds its share of KV heads, and at least one: with TP above the KV head
        count vLLM replicates heads across ranks. The MLA latent is whole on every rank."""
        return self.kv_layout.bytes_per_token_per_rank(tensor_parallel, pipeline_parallel)

    def _attention(self) -> tuple[int, int]:
        """(TP-split, replicated) attention parameters of one layer."""
        h, heads = self.hidden_size, self.attention_heads
        if self.mla is None:
            q, kv = heads * self.head_dim, self.kv_heads * self.head_dim
            return h * q + 2 * h * kv + q * h, 0
        m = self.mla
        q_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            q_split, q_replicated = m.q_lora_rank * heads * q_head, h * m.q_lora_rank
        else:
            q_split, q_replicated = h * heads * q_head, 0
        kv_b = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
        o_proj = heads * m.v_head_dim * h
        kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)
        return q_split + kv_b + o_proj, q_replicated + kv_a + m.indexer_weights

    def _mlp(self, routed: int) -> tuple[int, int, int]:
        """(dense MLP, shared experts, routed experts) parameters of the whole model, counting
        `routed` experts per MoE layer; gated MLPs have 3 matrices (gate, up, down)."""
        h = self.hidden_size
        dense = (self.layers - self.moe_layers) * 3 * h * self.intermediate_size
        shared = self.moe_layers * 3 * h * self.shared_expert_intermediate_size
        experts = self.moe_layers * routed * 3 * h * self.moe_intermediate_size
        return dense, shared, experts

    def _parameters(self, routed: int) -> int:
        """Attention and MLPs per layer, plus the embeddings; norms, biases and routers are
        negligible."""
        split, replicated = self._attention()
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        return self.layers * (split + replicated) + sum(self._mlp(routed)) + embeddings

    @property
    def parameters(self) -> int:
        """All weights: what must sit in GPU memory."""
        return self._parameters(self.experts)

    def weight_parts(self) -> WeightParts:
        """All weights at the precision the checkpoint stores each kind of layer in (attention,
        MLPs and experts as quantized, embeddings in the model's dtype), by how vLLM places
        them."""
        split, replicated = self._attention()
        dense, shared, experts = self._mlp(self.experts)
        size, dtype = self.precision.bytes_for, self.dtype_bytes
        attention_bytes = size("attention", dtype)
        embedding = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tied_embeddings else embedding
        return WeightParts(
            tp_split=self.layers * split * attention_bytes
            + dense * size("mlp", dtype)
            + embedding * dtype
            + lm_head * size("lm_head", dtype),
            replicated=self.layers * replicated * attention_bytes,
            shared_experts=shared * size("mlp", dtype),
            routed_experts=experts * size("expert", dtype),
            routed_expert_count=self.experts,
        )

    @property
    def weight_bytes(self) -> int:
        return math.ceil(self.weight_parts().total)

    @property
    def active_parameters(self) -> int:
        """Weights one token passes through: what the compute costs (MoE routes to a few)."""
        return self._parameters(self.experts_per_token)


# Hugging Face answers a config download in well under this; a stalled one ends here.
DOWNLOAD_TIMEOUT_SECONDS = 20
CONFIG_BYTES_MAX = 10_000_000
# Hugging Face repository ids: `owner/name`, letters, digits, '-', '_', '.', at most 96 each.
HF_MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
# The largest size any config key here holds in a real model is below 2**31 (vLLM keeps them in
# int32); beyond it the estimate's floats would overflow.
SIZE_MAX = 2**31 - 1
REQUIRED_SIZES = (
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_size",
    "vocab_size",
)


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
        if not path.is_file():
            raise OSError(f"{source}: no such file (a path; a Hugging Face model id is owner/name)")
        with path.open("rb") as file:
            data = file.read(CONFIG_BYTES_MAX + 1)
        if len(data) > CONFIG_BYTES_MAX:
            raise UnsupportedModelError(f"larger than {CONFIG_BYTES_MAX:,} bytes: not a config")
        text = data.decode(errors="replace")
    try:
        config = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise UnsupportedModelError("not a model config: JSON nested too deeply") from None
    except ValueError as error:
        raise UnsupportedModelError(f"not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise UnsupportedModelError("not a model config: expected a JSON object")
    return config


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


def _no_constant(name: str) -> Any:
    """json accepts NaN and Infinity; a model size never is either."""
    raise ValueError(f"{name} is not a number a model config can hold")


def _size(config: dict[str, Any], key: str, default: int | None = None) -> int:
    """A positive whole number, or a clear error naming the key."""
    value = config.get(key)
    if value is None:  # absent, or null as some configs write it
        value = default
    if value is None:
        raise UnsupportedModelError(f"{key} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= SIZE_MAX:
        raise UnsupportedModelError(
            f"{key} = {str(value)[:40]}; expected a whole number from 1 to {SIZE_MAX}"
        )
    return value


def _count(config: dict[str, Any], key: str, default: int, most: int) -> int:
    """A whole number from 0 to `most` (a layer index or count), or a clear error."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise UnsupportedModelError(
            f"{key} = {str(value)[:40]}; expected a whole number from 0 to {most}"
        )
    return value


def _moe_layers(config: dict[str, Any], layers: int) -> int:
    """How many layers route to experts, by each family's rule in vLLM 0.26:
    deepseek_v2.py (from first_k_dense_replace, every moe_layer_freq-th), qwen3_moe.py /
    qwen2_moe.py (not in mlp_only_layers, every decoder_sparse_step-th), Mixtral and gpt-oss
    (every layer)."""
    if config.get("n_routed_experts"):
        first = _count(config, "first_k_dense_replace", 0, layers)
        every = _size(config, "moe_layer_freq", 1)
        return len(range(math.ceil(first / every) * every, layers, every))
    if config.get("num_experts"):
        dense = config.get("mlp_only_layers") or []
        if not isinstance(dense, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in dense
        ):
            raise UnsupportedModelError("mlp_only_layers is not a list of layer numbers")
        every = _size(config, "decoder_sparse_step", 1)
        sparse = {i for i in dense if 0 <= i < layers and (i + 1) % every == 0}
        return layers // every - len(sparse)
    return layers


# Configs with kv_lora_rank that vLLM 0.26 does not cache as plain MLA (model_arch_config_
# convertor.py is_deepseek_mla lists them; their other layers are linear attention).
HYBRID_LATENT_MODELS = ("kimi_linear", "bailing_hybrid", "bailing_hybrid_mtp")
MLA_SIZES = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def _mla_dims(config: dict[str, Any], hidden_size: int) -> MlaDims | None:
    """vLLM takes a config as MLA when kv_lora_rank is set (and not null)."""
    if config.get("kv_lora_rank") is None:
        return None
    if "compress_ratios" in config:
        raise UnsupportedModelError(
            "DeepSeek-V4's compressed MLA (compress_ratios) is not sized here"
        )
    if config.get("model_type") in HYBRID_LATENT_MODELS:
        raise UnsupportedModelError(
            f"model_type {config['model_type']} mixes linear-attention layers with MLA; "
            "not sized here"
        )
    dims = {key: _size(config, key) for key in MLA_SIZES}
    q_lora = _size(config, "q_lora_rank") if config.get("q_lora_rank") is not None else None
    indexer = 0
    if config.get("index_topk") is not None:
        if q_lora is None:
            raise UnsupportedModelError("index_topk (sparse MLA) needs q_lora_rank")
        index_dim, index_heads = _size(config, "index_head_dim"), _size(config, "index_n_heads")
        # wq_b, wk and weights_proj of deepseek_v2.py's Indexer.
        indexer = q_lora * index_dim * index_heads + hidden_size * (index_dim + index_heads)
    return MlaDims(**dims, q_lora_rank=q_lora, indexer_weights=indexer)


def model_shape(model_config: dict[str, Any], kv_cache_dtype: str = "auto") -> ModelShape:
    """kv_cache_dtype as vLLM's engine option names it ("auto": the model's dtype)."""
    # Multimodal configs nest the language model; the quantization_config stays on top.
    config = model_config.get("text_config", model_config)
    if not isinstance(config, dict):
        raise UnsupportedModelError("text_config is not a JSON object")
    try:
        precision = weight_precision(
            model_config if "quantization_config" in model_config else config
        )
    except QuantizationError as error:
        raise UnsupportedModelError(str(error)) from None
    sizes = {key: _size(config, key) for key in REQUIRED_SIZES}
    layers, heads, hidden = (
        sizes["num_hidden_layers"],
        sizes["num_attention_heads"],
        sizes["hidden_size"],
    )
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise UnsupportedModelError(f"dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    mla = _mla_dims(config, hidden)
    try:
        if mla is None:
            kv_heads = _size(config, "num_key_value_heads", heads)
            if heads % kv_heads:
                raise UnsupportedModelError(
                    f"num_key_value_heads = {kv_heads} does not divide "
                    f"num_attention_heads = {heads}"
                )
            head_dim = _size(config, "head_dim", hidden // heads or None)
            kv = gqa_layout(
                layers=layers,
                kv_heads=kv_heads,
                head_dim=head_dim,
                cache_dtype=kv_cache_dtype,
                model_dtype_bytes=DTYPE_BYTES[dtype],
            )
        else:
            kv = mla_layout(
                layers=layers,
                kv_lora_rank=mla.kv_lora_rank,
                qk_rope_head_dim=mla.qk_rope_head_dim,
                cache_dtype=kv_cache_dtype,
                model_dtype_bytes=DTYPE_BYTES[dtype],
                index_head_dim=_size(config, "index_head_dim") if mla.indexer_weights else None,
            )
            kv_heads, head_dim = kv.kv_heads, kv.head_size
    except CacheLayoutError as error:
        raise UnsupportedModelError(str(error)) from None
    experts_key = next(
        (k for k in ("n_routed_experts", "num_experts", "num_local_experts") if config.get(k)),
        None,
    )
    experts = _size(config, experts_key) if experts_key else 0
    experts_per_token = (
        _size(config, "num_experts_per_tok") if config.get("num_experts_per_tok") else 0
    )
    if experts_per_token > max(experts, 1) and experts:
        raise UnsupportedModelError(
            f"num_experts_per_tok = {experts_per_token} exceeds the {experts} experts"
        )
    moe_layers = _moe_layers(config, layers) if experts else 0
    moe_intermediate = 0
    shared = 0
    if moe_layers:
        moe_key = "moe_intermediate_size" if config.get("moe_intermediate_size") else None
        moe_intermediate = _size(config, moe_key or "intermediate_size")
        if config.get("n_shared_experts"):
            shared = _size(config, "n_shared_experts") * moe_intermediate
        elif config.get("shared_expert_intermediate_size"):
            shared = _size(config, "shared_expert_intermediate_size")
    dense_layers = layers - moe_layers
    return ModelShape(
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        intermediate_size=_size(config, "intermediate_size") if dense_layers else 0,
        vocab_size=sizes["vocab_size"],
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        experts=experts,
        experts_per_token=experts_per_token,
        dtype_bytes=DTYPE_BYTES[dtype],
        precision=precision,
        moe_layers=moe_layers,
        moe_intermediate_size=moe_intermediate,
        shared_expert_intermediate_size=shared,
        mla=mla,
        kv=kv,
    )


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
    experts_per_gpu: float = 0  # routed experts of each MoE layer on the fullest GPU
    expert_weights_bytes_per_gpu: int = 0
    kv_tokens_per_dp_rank: int = 0
    kv_tokens_per_replica: int = 0
    max_model_len: int | None = None
    sequences_at_max_model_len: int | None = None  # per replica (DP group)

    @property
    def fits(self) -> bool:
        if self.max_model_len is not None and self.kv_tokens_per_dp_rank < self.max_model_len:
            return False
        return self.max_concurrent_sequences >= 1

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits}


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
) -> KvPlan:
    """One side's sizing. Raises ParallelismError for a layout vLLM refuses."""
    parallelism = Parallelism(
        tensor_parallel=tensor_parallel,
        pipeline_parallel=pipeline_parallel,
        data_parallel=data_parallel,
        expert_parallel=expert_parallel,
        eplb=eplb or redundant_experts > 0,
        redundant_experts=redundant_experts,
    )
    parallelism.check(shape.experts)
    per_request = shape.kv_bytes_per_token * input_tokens
    efa_bytes_per_second = instance.efa_bandwidth_gbps * 1e9 / 8 * EFA_EFFICIENCY
    transfer_efa = per_request / efa_bytes_per_second
    transfer_tcp = per_request / (TCP_SINGLE_FLOW_GBPS * 1e9 / 8)
    parts = shape.weight_parts()
    weights_per_gpu = parts.bytes_per_gpu(parallelism)
    usable = int(instance.gpu_memory_gib * 2**30 * gpu_memory_utilization)
    kv_budget = max(usable - weights_per_gpu, 0)
    # Each pipeline stage holds its layers' KV; each rank its heads' share of it (GQA) or the
    # whole latent (MLA). Every GPU of a DP rank holds the same tokens; DP ranks hold their own.
    per_gpu_token = shape.kv_bytes_per_token_per_gpu(tensor_parallel, pipeline_parallel)
    tokens_per_rank = kv_budget // per_gpu_token
    sequences = data_parallel * (tokens_per_rank // (input_tokens + output_tokens))
    at_max_len = None if max_model_len is None else tokens_per_rank // max_model_len
    flops = 2 * shape.active_parameters * input_tokens
    prefill = flops / (instance.gpu_bf16_tflops * 1e12 * parallelism.rank_gpus * PREFILL_MFU)
    verdict, pays_off = _verdict(input_tokens, transfer_efa, prefill, sequences)
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
        experts_per_gpu=parallelism.experts_per_gpu(shape.experts),
        expert_weights_bytes_per_gpu=parts.expert_bytes_per_gpu(parallelism),
        kv_tokens_per_dp_rank=tokens_per_rank,
        kv_tokens_per_replica=data_parallel * tokens_per_rank,
        max_model_len=max_model_len,
        sequences_at_max_model_len=None if at_max_len is None else data_parallel * at_max_len,
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
