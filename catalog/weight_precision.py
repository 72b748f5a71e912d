"""Bits per weight of a checkpoint, read from its Hugging Face config's `quantization_config`
the way vLLM 0.26 reads it, so that `pdctl plan` sizes FP8, INT4 and MXFP4 weights.

How vLLM reads it (vllm-project/vllm v0.26.0):
- vllm/config/model.py `_parse_quant_hf_config`: `quantization_config`, else
  `compression_config` (older compressed-tensors checkpoints); a ModelOpt checkpoint
  (`producer.name == "modelopt"`) becomes `modelopt` for `quant_algo` FP8 and `modelopt_fp4`
  for NVFP4. `quant_method` names the method, lower-cased.
- layers/quantization/fp8.py `Fp8Config.from_config`: `ignored_layers`, else
  `modules_to_not_convert`; `weight_block_size` (128 x 128 blocks, one float32 scale each).
- layers/quantization/mxfp4.py: MXFP4 (OCP microscaling: 4-bit E2M1 values, one 8-bit E8M0 scale
  per 32) applies to the fused-MoE experts; linear layers stay unquantized (gpt-oss lists its
  attention, router, embeddings and lm_head in `modules_to_not_convert`).
- layers/quantization/compressed_tensors/compressed_tensors.py: `config_groups.*.weights`
  (`num_bits`, `type`, `strategy`, `group_size`), `ignore` (names, or `re:` patterns).
- layers/quantization/awq.py (`bits`/`w_bit`, `group_size`/`q_group_size`, 16-bit scales and
  packed zero points per group, `modules_to_not_convert`); gptq.py (`bits`, `group_size`, -1 =
  per channel, `lm_head`); bitsandbytes.py (`load_in_4bit`, `load_in_8bit`).
Embeddings stay in the model's dtype under every method here; lm_head too, unless GPTQ says
`lm_head: true`. Scales are counted per group; per-channel and per-tensor scales are negligible.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from typing import Any

# A layer of each kind under the names vLLM gives them; an ignore entry that matches the name
# keeps that kind in the model's dtype.
ATTENTION_NAME = "model.layers.0.self_attn.q_proj"
MLP_NAME = "model.layers.0.mlp.gate_proj"
EXPERT_NAME = "model.layers.0.mlp.experts.0.gate_proj"
LM_HEAD_NAME = "lm_head"
MXFP4_BITS = 4 + 8 / 32
NVFP4_BITS = 4 + 8 / 16  # E2M1 values, one FP8 E4M3 scale per 16
GROUP_SCALE_BITS = 16


class QuantizationError(ValueError):
    """A quantization_config this estimate cannot read; says which key and what is known."""


@dataclass(frozen=True)
class WeightPrecision:
    """Bits per weight of each kind of layer; None = the model's dtype."""

    method: str  # "none" when the checkpoint is not quantized
    attention_bits: float | None = None
    mlp_bits: float | None = None
    expert_bits: float | None = None
    lm_head_bits: float | None = None

    def bytes_for(self, kind: str, dtype_bytes: int) -> float:
        bits = getattr(self, f"{kind}_bits")
        return dtype_bytes if bits is None else bits / 8


UNQUANTIZED = WeightPrecision("none")


def _ignored(patterns: list[str], name: str) -> bool:
    """vLLM's rules: an entry is a module name or prefix, a `re:` regular expression, or (in the
    checkpoints' own lists) a glob such as `model.layers.*.self_attn`."""
    for pattern in patterns:
        if pattern.startswith("re:"):
            try:
                if re.match(pattern[3:], name):
                    return True
            except re.error as error:
                raise QuantizationError(f"ignore pattern {pattern!r}: {error}") from None
        elif pattern in name or ("*" in pattern and fnmatch.fnmatchcase(name, f"{pattern}*")):
            return True
    return False


def _names(config: dict[str, Any], *keys: str) -> list[str]:
    for key in keys:
        value = config.get(key)
        if value:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise QuantizationError(f"quantization_config.{key} is not a list of names")
            return value
    return []


def _number(config: dict[str, Any], keys: tuple[str, ...], default: float | None = None) -> float:
    for key in keys:
        value = config.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise QuantizationError(f"quantization_config.{key} = {value!r}: not a number")
            if not math.isfinite(value):
                raise QuantizationError(f"quantization_config.{key} = {value}: not finite")
            return value
    if default is None:
        raise QuantizationError(f"quantization_config has no {' / '.join(keys)}")
    return default


def _grouped(bits: float, group_size: float, zero_point: bool) -> float:
    """Weight bits plus one 16-bit scale (and a zero point of the same width) per group; a
    group size of -1 or 0 means one scale per output channel: negligible."""
    if group_size <= 0:
        return bits
    return bits + (GROUP_SCALE_BITS + (bits if zero_point else 0)) / group_size


def _uniform(
    method: str, bits: float, ignored: list[str], lm_head: bool = False
) -> WeightPrecision:
    def bits_for(name: str) -> float | None:
        return None if _ignored(ignored, name) else bits

    return WeightPrecision(
        method,
        attention_bits=bits_for(ATTENTION_NAME),
        mlp_bits=bits_for(MLP_NAME),
        expert_bits=bits_for(EXPERT_NAME),
        lm_head_bits=bits if lm_head else None,
    )


def _compressed_tensors(config: dict[str, Any]) -> WeightPrecision:
    groups = config.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise QuantizationError("compressed-tensors: config_groups is missing or not an object")
    bits_seen = []
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            raise QuantizationError(f"compressed-tensors: config_groups.{name}.weights is missing")
        bits = _number(weights, ("num_bits",))
        if not 1 <= bits <= 16:
            raise QuantizationError(f"compressed-tensors: num_bits = {bits}")
        strategy = weights.get("strategy")
        group_size = (
            _number(weights, ("group_size",), -1) if strategy in ("group", "tensor_group") else -1
        )
        scale_bits = 8 if (bits == 4 and weights.get("type") == "float") else GROUP_SCALE_BITS
        per_group = bits + scale_bits / group_size if group_size > 0 else bits
        bits_seen.append(per_group)
    # Several groups target different layers; the widest is the upper bound for all.
    return _uniform("compressed-tensors", max(bits_seen), _names(config, "ignore"))


def weight_precision(model_config: dict[str, Any]) -> WeightPrecision:
    config = model_config.get("quantization_config")
    if config is None:
        config = model_config.get("compression_config")
    if config is None:
        return UNQUANTIZED
    if not isinstance(config, dict):
        raise QuantizationError("quantization_config is not a JSON object")
    producer = config.get("producer")
    method = config.get("quant_method")
    if isinstance(producer, dict) and producer.get("name") == "modelopt":
        quantization = config.get("quantization")
        algo = quantization.get("quant_algo") if isinstance(quantization, dict) else None
        method = {"FP8": "modelopt", "NVFP4": "modelopt_fp4"}.get(str(algo), f"modelopt {algo}")
    if method is None and "config_groups" in config:
        method = "compressed-tensors"
    if not isinstance(method, str):
        raise QuantizationError(f"quantization_config.quant_method = {method!r}: not a name")
    method = method.lower()
    if method == "fp8":
        return _uniform(method, 8, _names(config, "ignored_layers", "modules_to_not_convert"))
    if method == "mxfp4":
        ignored = _names(config, "ignored_layers", "modules_to_not_convert")
        return WeightPrecision(
            method, expert_bits=None if _ignored(ignored, EXPERT_NAME) else MXFP4_BITS
        )
    if method in ("modelopt", "modelopt_fp4"):
        bits = 8 if method == "modelopt" else NVFP4_BITS
        return _uniform(method, bits, _names(config, "exclude_modules", "ignore"))
    if method == "compressed-tensors":
        return _compressed_tensors(config)
    if method in ("awq", "awq_marlin"):
        bits = _number(config, ("bits", "w_bit"))
        group = _number(config, ("group_size", "q_group_size"), 128)
        zero = bool(config.get("zero_point", True))
        return _uniform(
            method, _grouped(bits, group, zero), _names(config, "modules_to_not_convert")
        )
    if method in ("gptq", "gptq_marlin"):
        bits = _number(config, ("bits",))
        group = _number(config, ("group_size",), 128)
        zero = not bool(config.get("sym", True))
        lm_head = bool(config.get("lm_head", False))
        return _uniform(
            method, _grouped(bits, group, zero), _names(config, "modules_to_not_convert"), lm_head
        )
    if method == "bitsandbytes":
        bits = 4.5 if config.get("load_in_4bit") else 8 if config.get("load_in_8bit") else None
        if bits is None:
            raise QuantizationError("bitsandbytes: neither load_in_4bit nor load_in_8bit")
        return _uniform(method, bits, _names(config, "llm_int8_skip_modules"))
    known = "fp8, mxfp4, compressed-tensors, awq, gptq, modelopt (FP8, NVFP4), bitsandbytes"
    raise QuantizationError(f"quantization method {method!r} is not sized here; known: {known}")
