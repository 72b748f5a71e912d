"""The configured model's architecture, scaled down to start in seconds on one GPU.

The real engine must run the same code paths as the deployed model (the architecture class, the
attention kind and the shape of the KV cache NIXL hands over), so what is kept is what decides
those paths: the ``architectures`` entry, GQA's group size, head_dim, MLA's latent (DeepSeek-V3:
``kv_lora_rank`` 512 + ``qk_rope_head_dim`` 64 = 576 values per token per layer), qk-norm (Qwen3's
is in the class, not the config), sliding windows and their per-layer pattern, MoE as MoE. What is
cut is only size: layers, hidden width, expert count and vocabulary. Weights are random and the
tokenizer is trained locally (tiny_model.py), so nothing is downloaded.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

LAYERS = 2  # one dense and one MoE layer for DeepSeek-style models; a window pattern may need more
KV_HEADS = 2  # GQA: key/value heads kept (the query group size is kept as it is)
MLA_HEADS = 16  # MLA: query heads; the latent dimensions are kept
HIDDEN = 1024  # MLA and MoE hidden width (GQA's follows from heads x head_dim)
INTERMEDIATE = 1024
EXPERTS = 8
EXPERTS_PER_TOKEN = 2
EXPERT_INTERMEDIATE = 256
DTYPE = "bfloat16"

# Expert-count keys by family: Qwen2/3-MoE, DeepSeek V2/V3 and Kimi K2, Mixtral and gpt-oss.
_EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")


class ScaleDownError(ValueError):
    """The configuration cannot be reproduced without downloading code or weights."""


def scale_down(config: Mapping[str, Any], *, vocab_size: int) -> tuple[dict[str, Any], list[str]]:
    """The small configuration and one line per change, ``key: before -> after``."""
    if not config.get("architectures"):
        raise ScaleDownError("config.json names no architectures")
    small = copy.deepcopy(dict(config))
    if "text_config" in small:
        raise ScaleDownError("multimodal configurations (text_config) are not supported")
    layers = _layer_count(small)
    changes: dict[str, Any] = {"num_hidden_layers": layers, "vocab_size": vocab_size}
    if "layer_types" in small:
        changes["layer_types"] = list(small["layer_types"][:layers])
    if "max_window_layers" in small:
        changes["max_window_layers"] = min(int(small["max_window_layers"]), layers)
    changes.update(_mla(small) if "kv_lora_rank" in small else _gqa(small))
    changes.update(_moe(small, layers))
    if "intermediate_size" in small:
        changes["intermediate_size"] = INTERMEDIATE
    if small.get("num_nextn_predict_layers"):
        changes["num_nextn_predict_layers"] = 0  # speculative MTP layers are not deployed here
    for key in ("torch_dtype", "dtype"):
        if key in small:
            changes[key] = DTYPE
    notes = [
        f"{key}: {small.get(key)!r} -> {value!r}"
        for key, value in changes.items()
        if small.get(key) != value
    ]
    small.update(changes)
    if "auto_map" in small:
        # The Hub's remote code for the class; transformers and vLLM implement the architectures
        # checked here natively, and nothing is downloaded (tiny_model refuses unknown types).
        small.pop("auto_map")
        notes.append("auto_map: removed (the natively implemented class is used)")
    if "quantization_config" in small:
        method = small.pop("quantization_config").get("quant_method", "?")
        notes.append(f"quantization_config: {method} -> removed (random bf16 weights)")
    return small, notes


def is_moe(config: Mapping[str, Any]) -> bool:
    return any(config.get(key) for key in _EXPERT_KEYS)


def _layer_count(config: Mapping[str, Any]) -> int:
    """Enough layers for every kind in a per-layer pattern (sliding and full attention) and for
    DeepSeek's dense-then-MoE split, else LAYERS."""
    layer_types = config.get("layer_types") or []
    needed = LAYERS
    for kind in set(layer_types):
        needed = max(needed, layer_types.index(kind) + 1)
    return needed


def _gqa(config: Mapping[str, Any]) -> dict[str, Any]:
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    if heads % kv_heads:
        raise ScaleDownError(f"num_attention_heads {heads} is not a multiple of {kv_heads}")
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    new_kv = min(kv_heads, KV_HEADS)
    new_heads = new_kv * (heads // kv_heads)
    return {
        "num_attention_heads": new_heads,
        "num_key_value_heads": new_kv,
        "head_dim": head_dim,
        # hidden = heads x head_dim keeps the classes that derive head_dim from it consistent
        "hidden_size": new_heads * head_dim,
    }


def _mla(config: Mapping[str, Any]) -> dict[str, Any]:
    """Fewer query heads and a narrower residual stream; the latent KV shape is untouched."""
    heads = min(int(config["num_attention_heads"]), MLA_HEADS)
    changes: dict[str, Any] = {"num_attention_heads": heads, "hidden_size": HIDDEN}
    if "num_key_value_heads" in config:
        changes["num_key_value_heads"] = heads
    return changes


def _moe(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    if not is_moe(config):
        return {}
    key = next(k for k in _EXPERT_KEYS if config.get(k))
    experts = min(int(config[key]), EXPERTS)
    per_token = min(int(config.get("num_experts_per_tok") or 1), EXPERTS_PER_TOKEN, experts)
    changes: dict[str, Any] = {key: experts, "num_experts_per_tok": per_token}
    if "moe_intermediate_size" in config:
        changes["moe_intermediate_size"] = EXPERT_INTERMEDIATE
    if "first_k_dense_replace" in config:
        # DeepSeek: layers below it are dense; keep one dense layer and the rest MoE.
        changes["first_k_dense_replace"] = min(int(config["first_k_dense_replace"]), layers - 1)
    if "n_group" in config:
        # Grouped routing (DeepSeek-V3 noaux_tc): groups must divide the experts, and the top
        # groups must hold at least num_experts_per_tok experts.
        groups = _largest_divisor_at_most(experts, int(config["n_group"] or 1))
        changes["n_group"] = groups
        changes["topk_group"] = min(int(config.get("topk_group") or groups), groups)
    return changes


def _largest_divisor_at_most(number: int, limit: int) -> int:
    return max(d for d in range(1, min(number, max(limit, 1)) + 1) if number % d == 0)


def kv_bytes_per_token(config: Mapping[str, Any], dtype_bytes: int = 2) -> int:
    """What one token's KV costs in every layer: MLA's one latent (kv_lora_rank +
    qk_rope_head_dim), or K and V for every key/value head. The figure NIXL moves per token."""
    layers = int(config["num_hidden_layers"])
    if "kv_lora_rank" in config:
        per_layer = int(config["kv_lora_rank"]) + int(config["qk_rope_head_dim"])
    else:
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        per_layer = 2 * kv_heads * head_dim
    return layers * per_layer * dtype_bytes
