"""vLLM engine options a user may pass through to one side's engine, checked before deploy.

What the image's vLLM accepts is data generated from its source (catalog/vllm_engine_args.json,
tools/vllm_engine_args.py): Ray Serve LLM 2.58 hands every ``engine_kwargs`` key to vLLM's
``AsyncEngineArgs`` or ``FrontendArgs`` and fails the replica at start for anything else, on
the GPU nodes, minutes into a deploy. Here the same mistakes fail at synth, with the reason.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from catalog.expert_parallel import DUAL_BATCH_OVERLAP_REFUSAL
from catalog.ray_llm_image import RAY, VLLM

ARGS_FILE = Path(__file__).resolve().parent.parent / "catalog" / "vllm_engine_args.json"

_PARALLELISM = (
    "a rank spans serving.<side>.tensor_parallel_size x pipeline_parallel_size GPUs of one "
    "node and a replica serving.<side>.data_parallel_size ranks; the worker groups, placement "
    "bundles and node counts are sized from those three, and Ray Serve LLM assigns the ranks"
)
# Keys the project sets itself, and where to change what they control.
OWNED: dict[str, str] = {
    "model": "set from serving.model.id (Ray Serve LLM refuses it in engine_kwargs)",
    "served_model_name": "set from serving.model.id (Ray Serve LLM refuses it in engine_kwargs)",
    "tensor_parallel_size": "use serving.<side>.tensor_parallel_size",
    "pipeline_parallel_size": "use serving.<side>.pipeline_parallel_size",
    "data_parallel_size": "use serving.<side>.data_parallel_size",
    "enable_expert_parallel": "use serving.<side>.expert_parallel",
    "all2all_backend": "use serving.<side>.all2all_backend (checked against what runs on EFA)",
    "enable_eplb": "use serving.<side>.eplb.enabled",
    "eplb_config": "use serving.<side>.eplb (its communicator is pinned to NCCL on EFA)",
    "enable_ep_weight_filter": "set by the project on each expert-parallel side without EPLB, "
    f"where {VLLM} honours it (serving_manifests/serve_config.py); under EPLB vLLM ignores it",
    "enable_dbo": DUAL_BATCH_OVERLAP_REFUSAL,
    "ubatch_size": DUAL_BATCH_OVERLAP_REFUSAL,
    "enable_elastic_ep": "elastic expert parallel resizes a DP group in place; Ray Serve LLM "
    f"({RAY}) restarts a gang whole and scales whole groups (data_parallel/dp_server.py)",
    "data_parallel_size_local": _PARALLELISM,
    "data_parallel_rank": _PARALLELISM,
    "data_parallel_start_rank": _PARALLELISM,
    "data_parallel_address": _PARALLELISM,
    "data_parallel_rpc_port": _PARALLELISM,
    "data_parallel_backend": _PARALLELISM,
    "data_parallel_hybrid_lb": _PARALLELISM,
    "data_parallel_external_lb": _PARALLELISM,
    "data_parallel_multi_port_external_lb": _PARALLELISM,
    "prefill_context_parallel_size": _PARALLELISM,
    "decode_context_parallel_size": _PARALLELISM,
    "nnodes": _PARALLELISM,
    "node_rank": _PARALLELISM,
    "master_addr": _PARALLELISM,
    "master_port": _PARALLELISM,
    "distributed_executor_backend": "Ray Serve LLM runs the engine's workers as Ray actors in "
    "the side's placement group ('ray') and refuses any other backend",
    "max_model_len": "use serving.max_model_len (the same on both sides)",
    "gpu_memory_utilization": "use serving.<side>.gpu_memory_utilization",
    "block_size": "use serving.kv_transfer.block_size (NIXL needs one block size on both sides)",
    "kv_transfer_config": "set from serving.kv_transfer: NIXL over EFA (LIBFABRIC) between the "
    "two sides",
    "hf_token": "use serving.model.hf_token_secret_arn: a token here would sit in plain text in "
    "the CloudFormation template and the RayService",
    "download_dir": "Ray Serve LLM downloads the weights into the node-local cache "
    "(serving.model.s3_uri or the Hugging Face id)",
}
# The engine options with which vLLM 0.26 replaces the KV connector itself: the CacheConfig
# fields VllmConfig._post_init_kv_transfer_config (vllm/config/vllm.py) reads. Refused on both
# sides by engine-option-pd (app_config/rules/engine_options.py), which names the setting to use.
CONNECTOR_REPLACING = ("kv_offloading_size", "kv_offloading_backend")
# Options that change what the NIXL handshake compares, or the prompt prefill computes: unequal
# on the two sides, decode never reads prefill's KV, or reads the KV of another prompt.
SAME_ON_BOTH_SIDES: dict[str, str] = {
    # vLLM 0.26 nixl/metadata.py compute_nixl_compatibility_hash: model dtype, KV cache dtype,
    # attention backend, hybrid KV cache manager; KV heads, head size and layer count (changed by
    # hf_overrides, hf_config_path, revision); nixl/base_worker.py compares every layer's block
    # length (kv_cache_dtype_skip_layers keeps some layers in the model dtype).
    "dtype": "NIXL compatibility hash (model dtype)",
    "kv_cache_dtype": "NIXL compatibility hash (cache dtype)",
    "kv_cache_dtype_skip_layers": "NIXL per-layer KV block length check",
    "attention_backend": "NIXL compatibility hash (attention backend)",
    "attention_config": "NIXL compatibility hash (attention backend)",
    "disable_hybrid_kv_cache_manager": "NIXL compatibility hash (hybrid KV cache manager)",
    "hf_overrides": "NIXL compatibility hash (KV heads, head size, layers)",
    "hf_config_path": "NIXL compatibility hash (KV heads, head size, layers)",
    "revision": "NIXL compatibility hash (KV heads, head size, layers)",
    "code_revision": "NIXL compatibility hash (KV heads, head size, layers)",
    "mamba_cache_dtype": "NIXL compatibility hash (cache dtype of Mamba layers)",
    "mamba_ssm_cache_dtype": "NIXL compatibility hash (cache dtype of Mamba layers)",
    # Ray 2.58 prefill_decode/pd_server.py sends prefill a copy of the chat request, which
    # prefill renders and tokenizes with its own frontend options (and rejects tool_choice
    # 'auto' without a tool parser); decode continues from prefill's tokens.
    "tokenizer": "prefill tokenizes the prompt decode continues",
    "tokenizer_mode": "prefill tokenizes the prompt decode continues",
    "tokenizer_revision": "prefill tokenizes the prompt decode continues",
    "chat_template": "prefill renders the chat request decode continues",
    "chat_template_content_format": "prefill renders the chat request decode continues",
    "default_chat_template_kwargs": "prefill renders the chat request decode continues",
    "trust_request_chat_template": "prefill renders the chat request decode continues",
    "enable_auto_tool_choice": "prefill renders the tools of the chat request (and refuses "
    "tool_choice 'auto' without it)",
    "tool_call_parser": "prefill renders the tools of the chat request (and refuses "
    "tool_choice 'auto' without it)",
    "tool_parser_plugin": "prefill renders the tools of the chat request",
    "exclude_tools_when_tool_choice_none": "prefill renders the tools of the chat request",
}
# `Name | str` annotations whose string vLLM still checks against the Literal: quantization
# against QUANTIZATION_METHODS = get_args(QuantizationMethods) (vllm/config/model.py, "Unknown
# quantization method"), with no plugin in the image to add more.
STRICT_CHOICES = frozenset({"quantization"})
# Parsers that vLLM looks up by name in its registries (tool_parsers, reasoning).
REGISTRIES = {"tool_call_parser": "tool_call_parsers", "reasoning_parser": "reasoning_parsers"}
PLUGINS = {"tool_call_parser": "tool_parser_plugin", "reasoning_parser": "reasoning_parser_plugin"}


@cache
def vllm_args() -> dict[str, Any]:
    return json.loads(ARGS_FILE.read_text())


def accepted() -> dict[str, str]:
    """Every option a side may set, with its vLLM annotation."""
    data = vllm_args()
    return {
        name: annotation
        for name, annotation in {**data["engine_args"], **data["frontend_args"]}.items()
        if name not in OWNED and not name.startswith("_")
    }


def value_rule(key: str) -> dict[str, Any]:
    """What vLLM takes as the option's value: its kinds, choices and bounds, generated from
    vLLM's source (tools/vllm_engine_args.py, ``values``)."""
    return vllm_args()["values"][key]


def name_problem(key: str) -> str | None:
    """Why the option may not be set here, or None for an option a side may set."""
    data = vllm_args()
    version = data["vllm_version"]
    if key in OWNED:
        return f"set by this project: {OWNED[key]}"
    if key.startswith("_"):
        return f"internal to vLLM {version}, not an option"
    if key in data["server_args"]:
        return (
            "configures vLLM's own HTTP server, which Ray Serve does not run (its proxy "
            "serves the API), so it would have no effect"
        )
    valid = accepted()
    if key not in valid:
        close = difflib.get_close_matches(key, valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return (
            f"not an engine option of vLLM {version} (the image's); {hint}see "
            "catalog/vllm_engine_args.json"
        )
    return None


def option_path(role: str, key: str, *, own: bool) -> str:
    """The setting an option of a side comes from: serving.<role>.engine_options where the side
    sets it itself, else serving.engine_options (both sides')."""
    return f"serving.{role}.engine_options.{key}" if own else f"serving.engine_options.{key}"


def coerced(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options a side may set, text coerced as `-c` delivers it into the type vLLM wants
    (what the renderer writes into engine_kwargs); refused names are left out."""
    return {key: coerce(key, value) for key, value in options.items() if not name_problem(key)}


def coerce(key: str, value: Any) -> Any:
    """Text becomes a number or a boolean where vLLM's type wants one and no text; an enum
    vLLM looks up by name takes any case (vllm/config/attention.py, validate_backend_before)."""
    rule = value_rule(key)
    types, choices = rule["types"], rule.get("choices", [])
    if not isinstance(value, str):
        return value
    if rule.get("case_insensitive"):
        for choice in choices:
            if isinstance(choice, str) and choice.casefold() == value.casefold():
                return choice
    if any(isinstance(c, int) and c == _int(value) for c in choices):
        return _int(value)
    if not takes_text(key) and value not in choices:
        return _from_text(value, types)
    return value


def takes_text(key: str) -> bool:
    """Free text is a value (a path, a name vLLM resolves later), except where vLLM checks a
    `Name | str` string against the Literal anyway (STRICT_CHOICES)."""
    return "str" in value_rule(key)["types"] and key not in STRICT_CHOICES


def _int(text: str) -> int | None:
    return int(text) if text.strip().lstrip("-").isdigit() else None


def _from_text(text: str, types: list[str]) -> Any:
    lowered = text.strip().lower()
    if "bool" in types and lowered in ("true", "false"):
        return lowered == "true"
    if "none" in types and lowered in ("none", "null"):
        return None
    for kind, convert in (("int", int), ("float", float)):
        if kind in types:
            try:
                return convert(text)
            except ValueError:
                continue
    return text


def nested(options: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A nested config option (``compilation_config``, ``profiler_config``, ...) as the mapping
    vLLM validates: given as a mapping, or as its JSON text; anything else is none (the value
    rule names it)."""
    value = options.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def lookup(options: Mapping[str, Any], path: str, default: Any = None) -> Any:
    """An option's value by its dotted path (``profiler_config.profiler``), ``default`` where
    it is not given; in a nested option whose keys vLLM reads with '-' as '_' (the catalog's
    ``dashes_in_keys``: ``speculative_config``), as vLLM reads them."""
    key, _, field = path.partition(".")
    if not field:
        return options.get(key, default)
    mapping = nested(options, key)
    if value_rule(key).get("dashes_in_keys"):
        mapping = {name.replace("-", "_"): value for name, value in mapping.items()}
    return mapping.get(field, default)


def numeric_option(options: Mapping[str, Any], key: str) -> float:
    """A numeric option's value, 0 when unset or not a number (the value rule names those)."""
    value = options.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def weight_offloader(options: Mapping[str, Any]) -> str | None:
    """The weight offloader vLLM 0.26 builds from the options (model_executor/offloader/base.py
    ``create_offloader``): ``offload_backend`` when set, else, for ``auto``, layer-group
    prefetch when ``offload_group_size`` is above 0, UVA when ``cpu_offload_gb`` is, else none.
    The other backend's settings are then ignored (vLLM warns; config/offload.py)."""
    backend = options.get("offload_backend") or "auto"
    if backend != "auto":
        return backend if backend in ("uva", "prefetch") else None
    if numeric_option(options, "offload_group_size") > 0:
        return "prefetch"
    return "uva" if numeric_option(options, "cpu_offload_gb") > 0 else None


def uva_offload_gib(options: Mapping[str, Any]) -> float:
    """GiB per GPU the UVA weight offload pins (``cpu_offload_gb``), 0 unless UVA is the
    offloader vLLM builds."""
    return numeric_option(options, "cpu_offload_gb") if weight_offloader(options) == "uva" else 0
