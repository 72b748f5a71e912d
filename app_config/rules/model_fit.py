"""What the model itself allows, judged at synth from its config.json: the file the user names
(serving.model.config_file), else the copy the app bundles for a model it knows
(catalog/model_configs). Without either, one warning says these rules were not checked; `pdctl
plan --model-config` applies them (and sizes weights and KV) before deploy. The rules of the
parallel layout against the model (heads over TP, experts for DP and EP) are
app_config/rules/model_parallel.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app_config import engine_options
from app_config.errors import Finding
from app_config.rules import WARNING, Rule, side_finding
from app_config.rules.model_parallel import side_findings
from catalog import model_config_file
from catalog.expert_placement import Parallelism
from catalog.model_architecture import (
    UnsupportedModelError,
    gpu_memory,
    model_shape,
    text_config,
)
from catalog.model_config_file import LENGTH_KEYS
from catalog.models import bundled_config
from catalog.ray_llm_image import VLLM
from catalog.weight_precision import QuantizationError, weight_precision

if TYPE_CHECKING:
    from app_config.model import Settings
    from app_config.side import Side

_CONFIG_PATH = "serving.model.config_file"


def model_config(settings: Settings) -> tuple[dict[str, Any] | None, str]:
    """The config.json the rules judge by, and where it came from."""
    model = settings.serving.model
    path = Path(model.config_file) if model.config_file else bundled_config(model.id)
    if path is None:
        return None, ""
    return model_config_file.read_file(path), str(path)


def derived_max_model_len(config: dict[str, Any]) -> float | None:
    """vLLM 0.26 config/model.py _get_and_verify_max_len: the smallest length key
    (model_max_length, where given, is the length), times the RoPE factor unless the rope type
    is su, longrope or llama3; yarn scales its original length; a null factor is 1; per-layer
    RoPE parameters (a mapping of mappings) take the last layer's factor, as vLLM's loop does."""
    text = text_config(config)
    lengths = [text[key] for key in LENGTH_KEYS if text.get(key) is not None]
    if not lengths:
        return None
    derived = float(text.get("model_max_length") or min(lengths))
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    if not isinstance(rope, dict) or "gemma3" in str(config.get("model_type")):
        return derived
    factor: Any = 1.0
    for layer in model_config_file.rope_layers(rope):
        rope_type = layer.get("rope_type") or layer.get("type")
        if rope_type in ("su", "longrope", "llama3"):
            continue
        factor = layer.get("factor", factor)
        if rope_type == "yarn" and layer.get("original_max_position_embeddings"):
            derived = float(layer["original_max_position_embeddings"])
    return derived * (1.0 if factor is None else float(factor))


def read_config(settings: Settings) -> tuple[dict[str, Any] | None, str, Finding | None]:
    try:
        config, source = model_config(settings)
    except OSError as error:
        problem = f"cannot be read: {error}"
    except UnsupportedModelError as error:
        problem = f"is not a model's config.json: {error}"
    else:
        return config, source, None
    return None, "", Finding(_CONFIG_PATH, problem, settings.serving.model.config_file)


def unreadable_config(settings: Settings) -> Iterator[Finding]:
    _, _, problem = read_config(settings)
    if problem:
        yield problem


def unchecked(settings: Settings) -> Iterator[Finding]:
    config, _, problem = read_config(settings)
    overridden = [side for side in settings.sides() if _hf_overrides(settings, side)]
    if config is not None and overridden and model_config_file.nests_when_built(config):
        yield Finding(
            "serving.model.id",
            "has a config.json whose language model transformers builds from its top level (a "
            "vision or audio config beside it, no text_config), and hf_overrides is set: where "
            "the engine's text config takes the overrides depends on that model's "
            "transformers class, so synth did not check the context length, the parallel "
            "layout, the weights or the KV room against it. Check them with `pdctl plan "
            "--model-config`",
            settings.serving.model.id,
        )
    if config is None and problem is None:
        yield Finding(
            "serving.model.id",
            "is a model the app has no config.json for: synth did not check the context "
            "length against the model's, the parallel layout against its attention heads and "
            "experts, its weights "
            "against the GPUs' memory, nor the quantization option against its own. Name the "
            f"model's config.json in {_CONFIG_PATH}, or run `pdctl plan --model-config` on it",
            settings.serving.model.id,
        )


def _hf_overrides(settings: Settings, side: Side) -> Any:
    return settings.serving.engine_options_for(side.role).get("hf_overrides")


def _per_side(
    settings: Settings,
) -> Iterator[tuple[Side, Any, dict[str, Any] | UnsupportedModelError, str]]:
    """Each side the model rules judge: its hf_overrides, the config.json as its engine reads
    it (or why vLLM could not), and where that came from. Left out: a side with overrides on a
    config transformers nests only when it builds it (model-unchecked says so)."""
    config, source, _ = read_config(settings)
    if not config:
        return
    for side in settings.sides():
        overrides = _hf_overrides(settings, side)
        if overrides and model_config_file.nests_when_built(config):
            continue
        try:
            merged = model_config_file.as_engine_reads(config, overrides)
        except UnsupportedModelError as error:
            yield side, overrides, error, source
            continue
        path = settings.serving.engine_option_path(side.role, "hf_overrides")
        yield side, overrides, merged, source if merged is config else f"{source} with {path}"


def side_configs(settings: Settings) -> Iterator[tuple[Side, dict[str, Any], str]]:
    """Each side with the config.json its engine reads: the file with the side's
    ``hf_overrides`` applied as vLLM applies them (a YaRN RoPE scaling, a longer
    max_position_embeddings), and where that came from. A side whose overrides break the
    config is left out here; hf_overrides_fields says why."""
    for side, _, merged, source in _per_side(settings):
        if not isinstance(merged, UnsupportedModelError):
            yield side, merged, source


def hf_overrides_fields(settings: Settings) -> Iterator[Finding]:
    refused: dict[str, Finding] = {}  # one finding for an option both sides take
    for side, overrides, merged, _ in _per_side(settings):
        if isinstance(merged, UnsupportedModelError):
            path = settings.serving.engine_option_path(side.role, "hf_overrides")
            refused[path] = Finding(
                path,
                f"is not what {VLLM} can read the model's config.json with: {merged}",
                overrides,
            )
    yield from refused.values()


def context_length(settings: Settings) -> Iterator[Finding]:
    wanted = settings.serving.max_model_len
    limits = [
        (derived_max_model_len(config), source) for _, config, source in side_configs(settings)
    ]
    short = [(limit, source) for limit, source in limits if limit is not None and wanted > limit]
    if not short:
        return
    limit, source = min(short)
    yield Finding(
        "serving.max_model_len",
        f"exceeds the model's context length, {int(limit)} tokens by its config.json "
        f"({source}): {VLLM} refuses to start the engine (config/model.py, "
        f"_get_and_verify_max_len); use at most {int(limit)}, or, for a model whose card "
        "documents a RoPE scaling (YaRN) for longer contexts, set it in both sides' "
        "engine_options.hf_overrides as the card gives it",
        wanted,
    )


# vLLM 0.26 config/model.py _verify_quantization: an engine `quantization` other than the
# checkpoint's quant_method is refused unless one of the override methods maps the checkpoint
# to it; these are the overrides by the checkpoint method they read
# (layers/quantization/*.py override_quantization_method). humming, inc and moe_wna16 accept
# many formats and are left to vLLM.
_ACCEPTED_QUANTIZATION = {
    "fp8": {"fp8", "deepseek_v4_fp8"},
    "gptq": {"gptq", "gptq_marlin"},
    "awq": {"awq", "awq_marlin"},
    "mxfp4": {"mxfp4", "gpt_oss_mxfp4"},
    "modelopt": {"modelopt"},
    "modelopt_fp4": {"modelopt_fp4"},
    "compressed-tensors": {"compressed-tensors"},
    "bitsandbytes": {"bitsandbytes"},
}
_BROAD_OVERRIDES = {"humming", "inc", "moe_wna16"}


def _checkpoint_method(config: dict[str, Any]) -> str | None:
    """The checkpoint's quantization method as vLLM names it, None when unquantized or unread."""
    try:
        method = weight_precision(config).method
    except QuantizationError:
        return None
    method = {"gptq_marlin": "gptq", "awq_marlin": "awq"}.get(method, method)
    return None if method == "none" else method


def quantization_matches_checkpoint(settings: Settings) -> Iterator[Finding]:
    config, source, _ = read_config(settings)
    method = _checkpoint_method(config) if config else None
    if method is None or method not in _ACCEPTED_QUANTIZATION:
        return
    for side in settings.sides():
        asked = settings.serving.engine_options_for(side.role).get("quantization")
        if asked is None or asked in _BROAD_OVERRIDES:
            continue
        if asked not in _ACCEPTED_QUANTIZATION[method]:
            yield Finding(
                f"{side.serving_setting}.engine_options.quantization",
                f"is {asked!r}, but the checkpoint is quantized with {method} by its "
                f"config.json ({source}): {VLLM} refuses the engine ('Quantization method "
                "specified in the model config does not match the quantization method "
                f"specified in the `quantization` argument'); remove the option or use one of "
                f"{sorted(_ACCEPTED_QUANTIZATION[method])}",
                asked,
            )


def _unquantized(config: dict[str, Any]) -> bool:
    try:
        return weight_precision(config).method == "none"
    except QuantizationError:  # a quantization config this app cannot read is one all the same
        return False


def _unquantized_checkpoint_asks(settings: Settings) -> Iterator[tuple[Any, str, dict, str]]:
    """Each side that asks for a quantization method on a checkpoint whose config.json has no
    quantization config: the side, the method, what vLLM's loader needs for it
    (catalog/vllm_engine_args.json ``quantization``, generated from vLLM's source by
    tools/vllm_quantization.py) and where the config.json came from. Skipped: a method vLLM
    builds all the same, one vLLM does not know (the option's value rule says so) and
    ``quantization_config`` given (vLLM resolves the two together)."""
    config, source, _ = read_config(settings)
    if config is None or not _unquantized(config):
        return
    methods = engine_options.vllm_args()["quantization"]
    for side in settings.sides():
        options = settings.serving.engine_options_for(side.role)
        asked = options.get("quantization")
        needs = methods.get(asked) if isinstance(asked, str) else None
        if needs is None or needs["builds_without_checkpoint"]:
            continue
        if options.get("quantization_config") is not None:
            continue
        yield side, asked, needs, source


def quantization_unbuildable(settings: Settings) -> Iterator[Finding]:
    """A method whose config vLLM builds only from the checkpoint's settings and reads no file
    for them, on a checkpoint without them: ``quant_cls()`` misses its arguments at weight load
    (vLLM 0.26 model_loader/weight_utils.py get_quant_config), on every replica, every time."""
    for side, asked, needs, source in _unquantized_checkpoint_asks(settings):
        if needs["files"]:
            continue
        online = sorted(m for m, n in engine_options.vllm_args()["quantization"].items()
                        if n["builds_without_checkpoint"])  # fmt: skip
        yield Finding(
            f"{side.serving_setting}.engine_options.quantization",
            f"is {asked!r}, which {VLLM} builds only from a quantized checkpoint's "
            f"quantization_config, and the checkpoint's config.json ({source}) has none: the "
            f"engine fails at weight load ({needs['config_class']} is built without its "
            "arguments; model_loader/weight_utils.py get_quant_config). Serve a checkpoint "
            f"quantized with {asked}, or quantize this one as it loads: {', '.join(online)}",
            asked,
        )


def quantization_needs_a_file(settings: Settings) -> Iterator[Finding]:
    """A method vLLM reads from a file beside config.json when config.json has no quantization
    config: only config.json is known here, so whether the file is in the model's repository
    is not; without it the engine fails at weight load ("Cannot find the config file for
    <method>", vLLM 0.26 model_loader/weight_utils.py get_quant_config). A warning: an older
    quantized checkpoint keeps its settings in that file alone."""
    for side, asked, needs, source in _unquantized_checkpoint_asks(settings):
        if not needs["files"]:
            continue
        yield side_finding(
            side.role,
            "model-quantization-file",
            f"{side.serving_setting}.engine_options.quantization",
            f"is {asked!r}, and the checkpoint's config.json ({source}) has no quantization "
            f"config: {VLLM} then reads {asked}'s settings from {' or '.join(needs['files'])} "
            "beside it, and fails at weight load without one ('Cannot find the config file "
            f"for {asked}'). Serve a checkpoint quantized with {asked}, use an online method "
            "(fp8 quantizes as the weights load), or acknowledge this if the model's "
            "repository has that file",
            asked,
        )


def _side_memory(settings: Settings, config: dict[str, Any], side: Any) -> Any:
    """The side's GPU memory by `pdctl plan`'s own sizing, or None where the model or the
    layout is one the sizing cannot read (a layout vLLM refuses for the model has its own
    findings, app_config/rules/model_parallel.py), or where the engine quantizes an
    unquantized checkpoint online (the weights are then smaller than the checkpoint says)."""
    options = settings.serving.engine_options_for(side.role)
    if options.get("quantization") and _checkpoint_method(config) is None:
        return None
    if side_findings(config, "", side):
        return None
    engine = side.engine
    try:
        shape = model_shape(config, str(options.get("kv_cache_dtype") or "auto"))
    except (UnsupportedModelError, QuantizationError):
        return None
    parallelism = Parallelism(
        tensor_parallel=side.tensor_parallel,
        pipeline_parallel=side.pipeline_parallel,
        data_parallel=side.data_parallel,
        expert_parallel=engine.expert_parallel,
        eplb=engine.eplb.enabled,
        redundant_experts=engine.eplb.num_redundant_experts,
    )
    memory = gpu_memory(
        shape, parallelism, side.instance.gpu_memory_gib, engine.gpu_memory_utilization
    )
    per_token = shape.kv_bytes_per_token_per_gpu(side.tensor_parallel, side.pipeline_parallel)
    return memory, per_token


def weights_fit_the_gpus(settings: Settings) -> Iterator[Finding]:
    for side, config, source in side_configs(settings):
        sized = _side_memory(settings, config, side)
        if sized is None or sized[0].weights_fit:
            continue
        memory, gib = sized[0], 2**30
        yield Finding(
            f"{side.serving_setting}.tensor_parallel_size",
            f"the model's weights take {memory.weights_bytes / gib:.1f} GiB per GPU at TP "
            f"{side.tensor_parallel} x PP {side.pipeline_parallel} (its config.json, {source}), "
            f"more than the {memory.usable_bytes / gib:.1f} GiB gpu_memory_utilization "
            f"{side.engine.gpu_memory_utilization} leaves of a {side.instance.gpu_model}'s "
            f"{side.instance.gpu_memory_gib} GiB: {VLLM} fails loading them (CUDA out of "
            "memory). Raise tensor_parallel_size or pipeline_parallel_size, use a quantized "
            "checkpoint, or a GPU with more memory (`pdctl plan` sizes the choices)",
            side.tensor_parallel,
        )


def kv_room(settings: Settings) -> Iterator[Finding]:
    wanted = settings.serving.max_model_len
    for side, config, source in side_configs(settings):
        sized = _side_memory(settings, config, side)
        if sized is None or not sized[0].weights_fit:
            continue
        memory, per_token = sized
        tokens = memory.kv_budget_bytes // per_token if per_token else wanted
        if tokens < wanted:
            yield Finding(
                f"{side.serving_setting}.gpu_memory_utilization",
                f"leaves {memory.kv_budget_bytes / 2**30:.1f} GiB per GPU beside the weights "
                f"(its config.json, {source}): about {tokens:,} tokens of KV cache, fewer than "
                f"max_model_len {wanted:,} before activations take their share; {VLLM} "
                "refuses to start when the cache cannot hold one max_model_len sequence. Raise "
                "tensor_parallel_size, lower serving.max_model_len, or check with `pdctl plan`",
                side.engine.gpu_memory_utilization,
            )


_READS = frozenset({"serving"})
RULES = (
    Rule("model-config-unreadable", _READS, unreadable_config),
    Rule(
        "model-unchecked", frozenset({"serving", "gpu_nodes"}), unchecked, WARNING, stack="serving"
    ),
    Rule("model-context-length", frozenset({"serving", "gpu_nodes"}), context_length),
    Rule("model-hf-overrides", frozenset({"serving", "gpu_nodes"}), hf_overrides_fields),
    Rule(
        "model-quantization", frozenset({"serving", "gpu_nodes"}), quantization_matches_checkpoint
    ),
    Rule(
        "model-quantization-unbuildable",
        frozenset({"serving", "gpu_nodes"}),
        quantization_unbuildable,
    ),
    Rule(
        "model-quantization-file",
        frozenset({"serving", "gpu_nodes"}),
        quantization_needs_a_file,
        WARNING,
        per_side=True,
        stack="serving",
    ),
    Rule("model-weights-per-gpu", frozenset({"serving", "gpu_nodes"}), weights_fit_the_gpus),
    Rule("model-kv-room", frozenset({"serving", "gpu_nodes"}), kv_room, WARNING, stack="serving"),
)
