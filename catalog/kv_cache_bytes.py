"""KV-cache bytes per token as vLLM 0.26 lays the cache out, for the two attention kinds `pdctl
plan` sizes: grouped-query attention (a K and a V vector per KV head per layer) and multi-head
latent attention (one compressed latent plus the rope key per layer, shared by every head).

Sources (vllm-project/vllm v0.26.0):
- vllm/v1/kv_cache_interface.py: `AttentionSpec` pages hold 2 (K, V) x KV heads x head size x
  dtype size per token; `MLAAttentionSpec.real_page_size_bytes` holds 1 x head size x dtype size
  per token, or 656 bytes for `fp8_ds_mla` (DeepSeek-V3.2's layout: 512 FP8 latent values, 4
  float32 scales, 64 BF16 rope values).
- vllm/model_executor/layers/attention/mla_attention.py `MLAAttention`: head_size =
  kv_lora_rank + qk_rope_head_dim, num_kv_heads = 1, and `get_kv_cache_spec` gives every
  tensor-parallel rank that same spec: the latent is replicated on each rank, not divided.
- vllm/config/model.py `ModelConfig.get_num_kv_heads`: 1 under MLA; otherwise
  max(1, KV heads // TP) per rank (heads are replicated when TP exceeds them).
- vllm/model_executor/models/deepseek_v2.py `Indexer` (DeepSeek-V3.2's sparse attention,
  `index_topk` in the config): a second cache per layer of index_head_dim FP8 values plus one
  float32 scale per 128 of them, stored as bytes.
- vllm/config/cache.py `CacheConfig.cache_dtype` ("auto" = the model's dtype, as
  vllm/utils/torch_utils.py `kv_cache_dtype_str_to_dtype` resolves it); vllm/model_executor/
  models/config.py `DeepseekV32ForCausalLM` turns "bfloat16" into "auto" for V3.2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from catalog.ray_llm_image import VLLM

# Bytes per cached element of the cache dtypes sized here; "auto" is the model's dtype.
CACHE_DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
FP8_CACHE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")
# DeepSeek-V3.2's packed sparse-MLA token (kv_interface.py): fixed for its 512 + 64 dims.
FP8_DS_MLA = "fp8_ds_mla"
FP8_DS_MLA_BYTES = 656
FP8_DS_MLA_DIMS = (512, 64)
# The V3.2 indexer's FP8 keys carry one float32 scale per this many values (deepseek_v2.py).
INDEXER_QUANT_BLOCK = 128
INDEXER_SCALE_BYTES = 4


class CacheLayoutError(ValueError):
    """A cache dtype or attention layout this estimate cannot size; says why."""


@dataclass(frozen=True)
class KvLayout:
    """What one token costs in the KV cache, whole model and per rank."""

    latent: bool  # multi-head latent attention: one vector per layer, not per head
    layers: int
    kv_heads: int  # 1 under MLA
    head_size: int  # GQA: head_dim; MLA: kv_lora_rank + qk_rope_head_dim
    cache_dtype: str  # as vLLM names it after resolving "auto"
    element_bytes: int
    packed_token_bytes: int | None = None  # fp8_ds_mla's fixed layout replaces head x dtype
    indexer_bytes: int = 0  # DeepSeek-V3.2's second, FP8 cache

    def _layer_bytes(self, heads: int) -> int:
        if self.latent:
            main = self.packed_token_bytes or self.head_size * self.element_bytes
            return main + self.indexer_bytes
        return 2 * heads * self.head_size * self.element_bytes

    @property
    def bytes_per_token(self) -> int:
        return self.layers * self._layer_bytes(self.kv_heads)

    def bytes_per_token_per_rank(self, tensor_parallel: int, pipeline_parallel: int = 1) -> int:
        """One GPU's share: its pipeline stage's layers (the largest stage when they do not
        divide) and, under GQA, its KV heads (at least one); the MLA latent is whole on every
        tensor-parallel rank."""
        heads = self.kv_heads if self.latent else max(1, self.kv_heads // tensor_parallel)
        return math.ceil(self.layers / pipeline_parallel) * self._layer_bytes(heads)


def gqa_layout(
    *, layers: int, kv_heads: int, head_dim: int, cache_dtype: str, model_dtype_bytes: int
) -> KvLayout:
    if cache_dtype == FP8_DS_MLA:
        raise CacheLayoutError(
            f"kv_cache_dtype {FP8_DS_MLA} is DeepSeek-V3.2's sparse-MLA layout; this model "
            f"has no multi-head latent attention; use auto, bfloat16, float16 or fp8"
        )
    name, size = _element(cache_dtype, model_dtype_bytes)
    return KvLayout(False, layers, kv_heads, head_dim, name, size)


def mla_layout(
    *,
    layers: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    cache_dtype: str,
    model_dtype_bytes: int,
    index_head_dim: int | None = None,
) -> KvLayout:
    """index_head_dim is set for DeepSeek-V3.2-style sparse MLA (the config's index_topk)."""
    head_size = kv_lora_rank + qk_rope_head_dim
    if index_head_dim is None:
        if cache_dtype == FP8_DS_MLA:
            raise CacheLayoutError(
                f"kv_cache_dtype {FP8_DS_MLA} is DeepSeek-V3.2's sparse-MLA layout; this "
                "model has no index_topk (dense MLA): use auto, bfloat16 or fp8"
            )
        name, size = _element(cache_dtype, model_dtype_bytes)
        return KvLayout(True, layers, 1, head_size, name, size)
    indexer = index_head_dim + index_head_dim // INDEXER_QUANT_BLOCK * INDEXER_SCALE_BYTES
    if cache_dtype == FP8_DS_MLA:
        if (kv_lora_rank, qk_rope_head_dim) != FP8_DS_MLA_DIMS:
            raise CacheLayoutError(
                f"kv_cache_dtype {FP8_DS_MLA} packs kv_lora_rank {FP8_DS_MLA_DIMS[0]} + "
                f"qk_rope_head_dim {FP8_DS_MLA_DIMS[1]}; this model has {kv_lora_rank} + "
                f"{qk_rope_head_dim}"
            )
        return KvLayout(True, layers, 1, head_size, FP8_DS_MLA, 1, FP8_DS_MLA_BYTES, indexer)
    if cache_dtype in FP8_CACHE_DTYPES:
        raise CacheLayoutError(
            f"kv_cache_dtype {cache_dtype} on sparse MLA (index_topk): {VLLM} stores it as "
            f"{FP8_DS_MLA} ({FP8_DS_MLA_BYTES} bytes a token per layer) under FLASHMLA_SPARSE "
            f"but as plain FP8 ({head_size}) under FLASHINFER_MLA_SPARSE, and picks the backend "
            f"on the GPU; set kv_cache_dtype {FP8_DS_MLA} or auto to size it"
        )
    name, size = _element("auto" if cache_dtype == "bfloat16" else cache_dtype, model_dtype_bytes)
    return KvLayout(True, layers, 1, head_size, name, size, None, indexer)


def _element(cache_dtype: str, model_dtype_bytes: int) -> tuple[str, int]:
    if cache_dtype == "auto":
        return "auto", model_dtype_bytes
    if cache_dtype in CACHE_DTYPE_BYTES:
        return cache_dtype, CACHE_DTYPE_BYTES[cache_dtype]
    known = ", ".join(["auto", *CACHE_DTYPE_BYTES, FP8_DS_MLA])
    raise CacheLayoutError(
        f"kv_cache_dtype {str(cache_dtype)[:40]!r} is not sized here; known: {known}"
    )
