"""What the model itself allows, judged at synth from its config.json: the file the user names
(serving.model.config_file), else the copy the app bundles for a model it knows
(catalog/model_configs). Without either, one warning says these rules were not checked; `pdctl
plan --model-config` applies them (and sizes weights and KV) before deploy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app_config.errors import Finding
from app_config.rules import WARNING, Rule
from catalog.models import bundled_config
from catalog.ray_llm_image import VLLM

if TYPE_CHECKING:
    from app_config.model import Settings

# vLLM 0.26 transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key: the
# smallest of these keys the config has is the model's context length.
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# Routed experts per MoE layer, by family (DeepSeek, Qwen-MoE, Mixtral).
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
_CONFIG_PATH = "serving.model.config_file"


def model_config(settings: Settings) -> tuple[dict[str, Any] | None, str]:
    """The config.json the rules judge by, and where it came from."""
    model = settings.serving.model
    path = Path(model.config_file) if model.config_file else bundled_config(model.id)
    if path is None:
        return None, ""
    return json.loads(path.read_text()), str(path)


def derived_max_model_len(config: dict[str, Any]) -> float | None:
    """vLLM 0.26 config/model.py _get_and_verify_max_len: the smallest length key, scaled by
    the RoPE factor unless the rope type is su, longrope or llama3 (yarn scales its original
    length); model_max_length, where given, is the length."""
    text = config.get("text_config", config)
    lengths = [text[key] for key in _LENGTH_KEYS if isinstance(text.get(key), int | float)]
    if not lengths:
        return None
    derived = float(text.get("model_max_length") or min(lengths))
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    if isinstance(rope, dict) and "gemma3" not in str(config.get("model_type")):
        rope_type = rope.get("rope_type") or rope.get("type")
        if rope_type not in ("su", "longrope", "llama3") and rope.get("factor"):
            if rope_type == "yarn" and rope.get("original_max_position_embeddings"):
                derived = float(rope["original_max_position_embeddings"])
            derived *= float(rope["factor"])
    return derived


def routed_experts(config: dict[str, Any]) -> int:
    text = config.get("text_config", config)
    return max((int(text[key]) for key in _EXPERT_KEYS if text.get(key)), default=0)


def _read(settings: Settings) -> tuple[dict[str, Any] | None, str, Finding | None]:
    try:
        config, source = model_config(settings)
    except (OSError, ValueError) as error:
        return (
            None,
            "",
            Finding(
                _CONFIG_PATH, f"cannot be read as JSON: {error}", settings.serving.model.config_file
            ),
        )
    if config is not None and not isinstance(config, dict):
        return (
            None,
            source,
            Finding(_CONFIG_PATH, "is not a JSON object (a config.json is one)", source),
        )
    return config, source, None


def unreadable_config(settings: Settings) -> Iterator[Finding]:
    _, _, problem = _read(settings)
    if problem:
        yield problem


def unchecked(settings: Settings) -> Iterator[Finding]:
    config, _, problem = _read(settings)
    if config is None and problem is None:
        yield Finding(
            "serving.model.id",
            "is a model the app has no config.json for: synth did not check the context "
            "length against the model's, nor data parallel against its experts. Name the "
            f"model's config.json in {_CONFIG_PATH}, or run `pdctl plan --model-config` on it",
            settings.serving.model.id,
        )


def context_length(settings: Settings) -> Iterator[Finding]:
    config, source, _ = _read(settings)
    limit = derived_max_model_len(config) if config else None
    wanted = settings.serving.max_model_len
    if limit is not None and wanted > limit:
        yield Finding(
            "serving.max_model_len",
            f"exceeds the model's context length, {int(limit)} tokens by its config.json "
            f"({source}): {VLLM} refuses to start the engine (config/model.py, "
            f"_get_and_verify_max_len); use at most {int(limit)}",
            wanted,
        )


def data_parallel_needs_experts(settings: Settings) -> Iterator[Finding]:
    config, source, _ = _read(settings)
    if not config or routed_experts(config):
        return
    for side in settings.sides():
        if side.data_parallel > 1:
            yield Finding(
                f"{side.serving_setting}.data_parallel_size",
                f"is {side.data_parallel}, but the model has no experts by its config.json "
                f"({source}): {VLLM} refuses data parallel for a dense model ('Non-MoE models "
                "do not support external data parallel mode'); use 1, and replicas for more "
                "throughput",
                side.data_parallel,
            )


_READS = frozenset({"serving"})
RULES = (
    Rule("model-config-unreadable", _READS, unreadable_config),
    Rule("model-unchecked", _READS, unchecked, WARNING, stack="serving"),
    Rule("model-context-length", _READS, context_length),
    Rule(
        "model-dense-data-parallel",
        frozenset({"serving", "gpu_nodes"}),
        data_parallel_needs_experts,
    ),
)
