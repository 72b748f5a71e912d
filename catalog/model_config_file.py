"""A model's config.json as synth's rules and `pdctl plan` read it: one reader with bounds, and
one check of the fields those rules read, so that a file no model would have is refused with the
key that is wrong instead of failing inside a rule.

Why both callers share it: synth reads ``serving.model.config_file`` (or the bundled copy) and
`pdctl plan --model-config` the same kind of file; a file one of them refused and the other took,
or a read that never ends (a FIFO, /dev/zero), would break the promise that bad input gets a clear
error in bounded time.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path
from typing import Any

from catalog.model_architecture import SIZE_MAX, UnsupportedModelError, text_config

# The largest config.json on the Hugging Face Hub is well under 1 MB (the bundled ones are 1 to
# 10 KB); ten times that is no model's config.
CONFIG_BYTES_MAX = 10_000_000

# vLLM 0.26 transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key: the
# smallest of these keys the config has is the model's context length.
LENGTH_KEYS = (
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
# The sizes the parallel-layout and memory rules divide by or multiply with: a present value
# must be a positive whole number (0 heads would pass vLLM's divisibility check and size
# nothing). The KV-head keys are vLLM 0.26's (ModelArchConfigConvertor get_total_num_kv_heads).
SIZE_KEYS = (
    "num_attention_heads",
    "num_key_value_heads",
    "n_head_kv",
    "num_kv_heads",
    "multi_query_group_num",
    "num_attention_groups",
    "hidden_size",
    "num_hidden_layers",
)
ROPE_KEYS = ("rope_scaling", "rope_parameters")


def _no_constant(name: str) -> Any:
    """json accepts NaN and Infinity; a model size never is either."""
    raise ValueError(f"{name} is not a number a model config can hold")


def parse(text: str) -> dict[str, Any]:
    """The JSON object of a config.json, or UnsupportedModelError saying why it is not one."""
    try:
        config = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise UnsupportedModelError("not a model config: JSON nested too deeply") from None
    except ValueError as error:
        raise UnsupportedModelError(f"not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise UnsupportedModelError("not a model config: expected a JSON object")
    check_fields(config)
    return config


def read_file(path: Path) -> dict[str, Any]:
    """A config.json on disk, read at most CONFIG_BYTES_MAX bytes. Only a regular file: a
    device or a FIFO named by mistake would be read for ever. OSError for what cannot be read,
    UnsupportedModelError for what is not a model config. Read once while the file is
    unchanged: every model rule asks for it (the result is shared; callers do not change it)."""
    if not path.is_file():
        what = "no such file" if not path.exists() else "not a regular file"
        raise OSError(f"{path}: {what}")
    stat = path.stat()
    return _read_regular_file(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _read_regular_file(path: str, _mtime_ns: int, _size: int) -> dict[str, Any]:
    with open(path, "rb") as file:
        data = file.read(CONFIG_BYTES_MAX + 1)
    if len(data) > CONFIG_BYTES_MAX:
        raise UnsupportedModelError(f"larger than {CONFIG_BYTES_MAX:,} bytes: not a config")
    return parse(data.decode(errors="replace"))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive_number(where: str, value: Any) -> None:
    if not _number(value) or value <= 0:
        raise UnsupportedModelError(f"{where} = {str(value)[:40]}; expected a positive number")


def _positive_size(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= SIZE_MAX:
        raise UnsupportedModelError(
            f"{where} = {str(value)[:40]}; expected a whole number from 1 to {SIZE_MAX}"
        )


def check_fields(config: dict[str, Any]) -> None:
    """The keys the rules read, where present and not null, have the shape a model's config
    gives them; absent keys are for each rule to judge (it skips what the config does not say)."""
    text = text_config(config)
    prefix = "text_config." if text is not config else ""
    for key in LENGTH_KEYS:
        if text.get(key) is not None:
            _positive_number(f"{prefix}{key}", text[key])
    for key in SIZE_KEYS:
        if text.get(key) is not None:
            _positive_size(f"{prefix}{key}", text[key])
    for key in ROPE_KEYS:
        rope = text.get(key)
        if rope is None:
            continue
        if not isinstance(rope, dict):
            raise UnsupportedModelError(f"{prefix}{key} is not a JSON object")
        for field in ("factor", "original_max_position_embeddings"):
            if rope.get(field) is not None:
                _positive_number(f"{prefix}{key}.{field}", rope[field])


def nests_when_built(config: dict[str, Any]) -> bool:
    """A config.json with a nested config of its own (a mapping with a ``model_type``: a
    vision or audio encoder) and no ``text_config``: transformers 5 may build the language
    model's config from the top-level keys (Qwen2-VL and Qwen2.5-VL do), and then an override
    of a top-level key no longer reaches what vLLM reads (``hf_text_config``)."""
    return "text_config" not in config and any(
        isinstance(value, dict) and "model_type" in value for value in config.values()
    )


def rope_layers(rope: dict[str, Any]) -> list[dict[str, Any]]:
    """The RoPE parameters of each layer type: transformers 5 may nest them by layer type (a
    mapping of mappings, vLLM's ``is_rope_parameters_nested``), else one mapping for all."""
    nested = bool(rope) and all(isinstance(value, dict) for value in rope.values())
    return list(rope.values()) if nested else [rope]


def as_engine_reads(config: dict[str, Any], overrides: Any) -> dict[str, Any]:
    """The config.json with a side's ``hf_overrides`` applied as vLLM applies them
    (``with_hf_overrides``), after ``check_overrides``, and checked as a file is; the config
    itself where there are none (the engine-option rules judge hf_overrides that is not a
    mapping). UnsupportedModelError where vLLM could not read the result."""
    if not isinstance(overrides, dict) or not overrides:
        return config
    check_overrides(overrides)
    merged = with_hf_overrides(config, overrides)
    check_fields(merged)
    return merged


def check_overrides(overrides: dict[str, Any]) -> None:
    """What vLLM 0.26 reads from ``hf_overrides`` as given: a top-level ``rope_parameters``
    mapping is set on the config as it is (``_apply_dict_overrides``; transformers
    standardizes only what is set as ``rope_scaling``), and ``_get_and_verify_max_len`` then
    reads its ``rope_type``, and for yarn its ``original_max_position_embeddings``, by key:
    without them the engine stops with a KeyError."""
    rope = overrides.get("rope_parameters")
    if not isinstance(rope, dict):
        return
    for layer in rope_layers(rope):
        missing = [key for key in ("rope_type",) if key not in layer]
        if layer.get("rope_type") == "yarn" and "original_max_position_embeddings" not in layer:
            missing.append("original_max_position_embeddings")
        if missing:
            raise UnsupportedModelError(
                f"rope_parameters has no {' or '.join(missing)}, which vLLM reads from it as "
                "given (transformers fills them in only for rope_scaling): give them, or set "
                "the scaling as rope_scaling"
            )


def with_hf_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The config.json as vLLM 0.26 reads it with the engine option ``hf_overrides``
    (vllm/config/model.py ``ModelConfig.__post_init__``): a value that is not a mapping is set
    on the top-level config (transformers' ``PretrainedConfig.update``); a mapping updates a
    nested config key by key, recursively (``_update_nested``), and replaces any other
    attribute (``_apply_dict_overrides``). A nested config is one transformers builds as a
    config of its own: ``text_config``, or a mapping with its own ``model_type``. Transformers
    5 keeps ``rope_scaling`` as another name of ``rope_parameters``
    (configuration_utils.py), so setting either sets both."""
    merged = copy.deepcopy(config)
    for key, value in overrides.items():
        current = merged.get(key)
        nested = key == "text_config" or (isinstance(current, dict) and "model_type" in current)
        if isinstance(value, dict) and nested and isinstance(current, dict):
            _update_nested(current, value)
        else:
            _set(merged, key, copy.deepcopy(value))
    return merged


def _update_nested(target: dict[str, Any], updates: dict[str, Any]) -> None:
    for key, value in updates.items():
        current = _get(target, key)
        if isinstance(value, dict) and isinstance(current, dict):
            _update_nested(current, value)
            _set(target, key, current)  # one object under both RoPE names
        else:
            _set(target, key, copy.deepcopy(value))


def _get(config: dict[str, Any], key: str) -> Any:
    if key in ROPE_KEYS:
        return next((config[k] for k in ROPE_KEYS if config.get(k) is not None), None)
    return config.get(key)


def _set(config: dict[str, Any], key: str, value: Any) -> None:
    for name in ROPE_KEYS if key in ROPE_KEYS else (key,):
        config[name] = value
