"""A model's architecture as `pdctl plan` sizes it, read from its Hugging Face config.json the
way vLLM 0.26 reads it: layers, attention (grouped-query, or multi-head latent for
DeepSeek-V2/V3/R1 and Kimi K2: kv_lora_rank), dense and MoE layers (routed and shared
experts), and the checkpoint's weight precision (weight_precision.py). Sliding-window layers are
counted at full length (an upper bound); DeepSeek's multi-token-prediction layer
(num_nextn_predict_layers) is loaded only for speculative decoding and not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from catalog.expert_placement import Parallelism, WeightParts
from catalog.kv_cache_bytes import CacheLayoutError, KvLayout, gqa_layout, mla_layout
from catalog.weight_precision import (
    UNQUANTIZED,
    QuantizationError,
    WeightPrecision,
    weight_precision,
)

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "fp8": 1}


class UnsupportedModelError(ValueError):
    """The config describes an attention layout this estimate cannot size."""


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config.json: multimodal configs nest it as
    ``text_config``; null there means the top level, as transformers' get_text_config reads it.
    Not an object at all: UnsupportedModelError."""
    text = config.get("text_config")
    if text is None:
        return config
    if not isinstance(text, dict):
        raise UnsupportedModelError("text_config is not a JSON object")
    return text


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

    @property
    def router_parameters(self) -> int:
        """Every MoE layer's router (gate): hidden x routed experts, whole on every rank and
        never quantized. vLLM 0.26 deepseek_v2.py builds it as `GateLinear`, a
        `ReplicatedLinear` with `quant_config=None` (fused_moe/router/gate_linear.py);
        mixtral.py and qwen3_moe.py as `ReplicatedLinear`. 0.2 GiB on DeepSeek-V3 in bf16.
        DeepSeek's e_score_correction_bias (one float32 per expert) is negligible."""
        return self.moe_layers * self.hidden_size * self.experts

    def mla_absorbed_parameters(self, tensor_parallel: int = 1) -> int:
        """One TP rank's copies of each layer's kv_b_proj that MLA keeps beside it: vLLM 0.26
        `MLAAttention.process_weights_after_loading` (model_executor/layers/attention/
        mla_attention.py) dequantizes kv_b_proj to the activation dtype and stores W_UV and
        W_UK_T ("we just store fp16/bf16 copies"), kv_lora_rank x the rank's heads x
        (qk_nope_head_dim + v_head_dim) per layer, while kv_b_proj stays for prefill. 1.9 GiB
        per TP-1 rank on DeepSeek-V3."""
        if self.mla is None:
            return 0
        m = self.mla
        heads = max(self.attention_heads // tensor_parallel, 1)
        return self.layers * m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)

    def _parameters(self, routed: int) -> int:
        """Attention and MLPs per layer, the routers, plus the embeddings; norms and biases are
        negligible."""
        split, replicated = self._attention()
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        return (
            self.layers * (split + replicated)
            + sum(self._mlp(routed))
            + self.router_parameters
            + embeddings
        )

    @property
    def parameters(self) -> int:
        """All weights: what must sit in GPU memory."""
        return self._parameters(self.experts)

    def weight_parts(self) -> WeightParts:
        """All weights at the precision the checkpoint stores each kind of layer in (attention,
        MLPs and experts as quantized, embeddings, routers and MLA's absorbed copies in the
        model's dtype), by how vLLM places them."""
        split, replicated = self._attention()
        dense, shared, experts = self._mlp(self.experts)
        size, dtype = self.precision.bytes_for, self.dtype_bytes
        attention_bytes = size("attention", dtype)
        embedding = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tied_embeddings else embedding
        return WeightParts(
            tp_split=self.layers * split * attention_bytes
            + self.mla_absorbed_parameters() * dtype
            + dense * size("mlp", dtype)
            + embedding * dtype
            + lm_head * size("lm_head", dtype),
            replicated=self.layers * replicated * attention_bytes + self.router_parameters * dtype,
            shared_experts=shared * size("mlp", dtype),
            routed_experts=experts * size("expert", dtype),
            routed_expert_count=self.experts,
        )

    @property
    def weight_bytes(self) -> int:
        return math.ceil(self.weight_parts().total)

    def checkpoint_bytes_read(self, local_experts: int | None = None) -> int:
        """What one rank reads from the model files at load: everything (vLLM's loader reads
        every tensor and each layer keeps its share), or, with `enable_ep_weight_filter`, every
        tensor but the routed experts of other ranks (`local_experts` of each MoE layer:
        model_loader/ep_weight_filter.py skips `.experts.<id>.` weights not local). MLA's
        absorbed copies are made after loading, not read."""
        parts = self.weight_parts()
        on_disk = parts.total - self.mla_absorbed_parameters() * self.dtype_bytes
        if local_experts is None or not self.experts:
            return math.ceil(on_disk)
        skipped = parts.routed_experts * (self.experts - local_experts) / self.experts
        return math.ceil(on_disk - skipped)

    @property
    def active_parameters(self) -> int:
        """Weights one token passes through: what the compute costs (MoE routes to a few)."""
        return self._parameters(self.experts_per_token)


# The largest size any config key here holds in a real model is below 2**31 (vLLM keeps them in
# int32); beyond it the estimate's floats would overflow.
SIZE_MAX = 2**31 - 1
REQUIRED_SIZES = (
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_size",
    "vocab_size",
)


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


@dataclass(frozen=True)
class Architecture:
    """What a named architecture is made of, by the fields its config class defines."""

    config_class: str  # transformers' configuration class of the model_type
    experts_key: str | None = None  # a mixture of experts: routed experts per MoE layer
    mla: bool = False  # multi-head latent attention: kv_lora_rank


# model_type -> architecture, for the MoE and MLA families plan sizes. transformers' config
# classes define these fields, each with a default (DeepseekV3Config: n_routed_experts=256,
# kv_lora_rank=512, those of DeepSeek-V3 itself; models/deepseek_v3/configuration_deepseek_v3.py),
# and vLLM 0.26 loads a config through them (vllm/transformers_utils/config.py, AutoConfig), so a
# config.json that leaves such a field out is read with another checkpoint's value. plan refuses
# it instead: a config that does not describe its own architecture is not the checkpoint's, and
# sizing it as a dense or grouped-query model answers for a model nobody runs.
ARCHITECTURES: dict[str, Architecture] = {
    "deepseek_v2": Architecture("DeepseekV2Config", "n_routed_experts", mla=True),
    "deepseek_v3": Architecture("DeepseekV3Config", "n_routed_experts", mla=True),
    "deepseek_v32": Architecture("DeepseekV32Config", "n_routed_experts", mla=True),
    "kimi_k2": Architecture("DeepseekV3Config", "n_routed_experts", mla=True),
    "qwen2_moe": Architecture("Qwen2MoeConfig", "num_experts"),
    "qwen3_moe": Architecture("Qwen3MoeConfig", "num_experts"),
    "mixtral": Architecture("MixtralConfig", "num_local_experts"),
    "gpt_oss": Architecture("GptOssConfig", "num_local_experts"),
}
# vLLM picks the model class by `architectures` (vllm/model_executor/models/registry.py):
# naming one of these is naming the architecture as much as model_type is.
ARCHITECTURE_CLASSES: dict[str, str] = {
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "MixtralForCausalLM": "mixtral",
    "GptOssForCausalLM": "gpt_oss",
}


def named_architectures(model_config: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The model_types a config names: its own (or its text_config's) model_type, and those of
    the classes in `architectures`."""
    named = []
    for model_type in (config.get("model_type"), model_config.get("model_type")):
        if isinstance(model_type, str) and model_type in ARCHITECTURES:
            named.append(model_type)
    classes = model_config.get("architectures") or config.get("architectures") or []
    if isinstance(classes, list):
        named += [ARCHITECTURE_CLASSES[c] for c in classes if c in ARCHITECTURE_CLASSES]
    return list(dict.fromkeys(named))


def check_describes_its_architecture(model_config: dict[str, Any], config: dict[str, Any]) -> None:
    """Refuses a config that names an MoE or MLA architecture but lacks the fields that make it
    one (see ARCHITECTURES: sized without them it would be another architecture)."""
    for model_type in named_architectures(model_config, config):
        architecture = ARCHITECTURES[model_type]
        missing = []
        if architecture.experts_key and not config.get(architecture.experts_key):
            missing.append(f"{architecture.experts_key} (its routed experts)")
        if architecture.mla and config.get("kv_lora_rank") is None:
            missing.append("kv_lora_rank (its multi-head latent attention)")
        if missing:
            kinds = " with ".join(
                kind
                for kind, present in (
                    ("a mixture of experts", architecture.experts_key),
                    ("multi-head latent attention", architecture.mla),
                )
                if present
            )
            raise UnsupportedModelError(
                f"the config names {model_type} ({kinds}) but has no {' and no '.join(missing)}; "
                f"sized without it, it would be another architecture, and vLLM would load it "
                f"with transformers' {architecture.config_class} defaults, which are another "
                "checkpoint's: use the model's own config.json"
            )


def model_shape(model_config: dict[str, Any], kv_cache_dtype: str = "auto") -> ModelShape:
    """kv_cache_dtype as vLLM's engine option names it ("auto": the model's dtype)."""
    # Multimodal configs nest the language model; the quantization_config stays on top.
    config = text_config(model_config)
    check_describes_its_architecture(model_config, config)
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
class GpuMemory:
    """One GPU of a rank: its share of the weights, and what vLLM may use of it
    (gpu_memory_utilization of the GPU's memory, vLLM 0.26 config/cache.py); the rest of that is
    the KV cache's, less activations and CUDA graphs, which only vLLM's profiling run knows."""

    weights_bytes: int
    usable_bytes: int

    @property
    def kv_budget_bytes(self) -> int:
        return max(self.usable_bytes - self.weights_bytes, 0)

    @property
    def weights_fit(self) -> bool:
        return self.weights_bytes <= self.usable_bytes


def gpu_memory(
    shape: ModelShape, parallelism: Parallelism, gpu_memory_gib: int, utilization: float
) -> GpuMemory:
    """The weights per GPU under this layout (TP, PP, DP and expert parallel, quantized as the
    checkpoint says) against the GPU's usable memory: what `pdctl plan` sizes and synth's
    model-weights rule judges (app_config/rules/model_fit.py)."""
    return GpuMemory(
        weights_bytes=shape.weight_parts().bytes_per_gpu(parallelism),
        usable_bytes=int(gpu_memory_gib * 2**30 * utilization),
    )
