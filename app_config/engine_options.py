"""vLLM engine options a user may pass through to one side's engine, checked before deploy.

What the image's vLLM accepts is data generated from its source (catalog/vllm_engine_args.json,
tools/vllm_engine_args.py): Ray Serve LLM 2.58 hands every ``engine_kwargs`` key to vLLM's
``AsyncEngineArgs`` or ``FrontendArgs`` and fails the replica at start for anything else, on
the GPU nodes, minutes into a deploy. Here the same mistakes fail at synth, with the reason.
"""

from __future__ import annotations

import ast
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
    "2.58 restarts a gang whole and scales whole groups (data_parallel/dp_server.py)",
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


def problems(options: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The options with text coerced as `-c` delivers it, and (key, message) for each that
    vLLM would refuse or that the project sets itself."""
    data, valid = vllm_args(), accepted()
    version = data["vllm_version"]
    coerced: dict[str, Any] = {}
    found: list[tuple[str, str]] = []
    for key, value in options.items():
        if key in OWNED:
            found.append((key, f"set by this project: {OWNED[key]}"))
        elif key.startswith("_"):
            found.append((key, f"internal to vLLM {version}, not an option"))
        elif key in data["server_args"]:
            found.append((key, (
                "configures vLLM's own HTTP server, which Ray Serve does not run (its proxy "
                "serves the API), so it would have no effect"
            )))  # fmt: skip
        elif key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            found.append((key, (
                f"not an engine option of vLLM {version} (the image's); {hint}see "
                "catalog/vllm_engine_args.json"
            )))  # fmt: skip
        else:
            value, message = check_value(key, valid[key], value)
            if message:
                found.append((key, message))
            coerced[key] = value
    for key, registry in REGISTRIES.items():
        name = coerced.get(key)
        if name and not coerced.get(PLUGINS[key]) and name not in data[registry]:
            found.append((key, (
                f"{name!r} is not a parser vLLM {version} registers; valid: "
                f"{', '.join(data[registry])}"
            )))  # fmt: skip
    return coerced, found


def mismatches(prefill: Mapping[str, Any], decode: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for options that must be equal on both sides and are not."""
    found = []
    for key, reason in SAME_ON_BOTH_SIDES.items():
        if key in prefill or key in decode:
            left, right = prefill.get(key, "<vLLM default>"), decode.get(key, "<vLLM default>")
            if left != right:
                found.append((key, (
                    f"prefill has {left!r}, decode {right!r}; the two sides must agree ({reason}): "
                    "set it in serving.engine_options to give both the same value"
                )))  # fmt: skip
    return found


def scheduler_problems(options: Mapping[str, Any], max_model_len: int) -> list[tuple[str, str]]:
    """vLLM 0.26 SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py), which fails
    the engine at start."""
    found = []
    batched, seqs = options.get("max_num_batched_tokens"), options.get("max_num_seqs")
    if isinstance(batched, int) and isinstance(seqs, int) and batched < seqs:
        found.append(("max_num_batched_tokens", (
            f"{batched} is below max_num_seqs {seqs}; vLLM requires max_num_batched_tokens >= "
            "max_num_seqs"
        )))  # fmt: skip
    if (
        isinstance(batched, int)
        and options.get("enable_chunked_prefill") is False
        and batched < max_model_len
    ):
        found.append(("max_num_batched_tokens", (
            f"{batched} is below serving.max_model_len {max_model_len} with chunked prefill "
            "off; vLLM refuses that (no prompt longer than one batch could run): raise it or "
            "turn chunked prefill on"
        )))  # fmt: skip
    return found


def loader_problems(options: Mapping[str, Any], s3_uri: str | None) -> list[tuple[str, str]]:
    """With Ray 2.58 (the image's) a streaming load format hands vLLM the model id instead of
    the S3 path, and the engine fails to start (ray-project/ray#64978): weights from S3 come
    through Ray's mirror into the node-local cache instead."""
    load_format = options.get("load_format")
    if s3_uri and isinstance(load_format, str) and load_format.startswith("runai_streamer"):
        return [("load_format", (
            f"{load_format!r} with serving.model.s3_uri fails at engine start under {RAY} "
            "(ray-project/ray#64978: vLLM gets the model id, not the S3 path); leave "
            "load_format unset"
        ))]  # fmt: skip
    return []


def check_value(key: str, annotation: str, value: Any) -> tuple[Any, str | None]:
    """Does ``value`` fit the vLLM annotation? Text from `-c` becomes a number or a boolean
    where the annotation wants one and no text."""
    kinds = _alternatives(annotation)
    literals, enums = vllm_args()["literals"], vllm_args()["enums"]
    choices: list[Any] = []
    for kind in kinds:
        if kind.startswith("Literal["):
            choices += list(ast.literal_eval(f"({kind[len('Literal[') : -1]},)"))
        elif kind in literals:
            choices += literals[kind]
        elif kind in enums:
            # An enum is given by a member's value (OptimizationLevel 2, MambaBackendEnum
            # "triton") or, for the attention backends, by its name, case-insensitively, or
            # "auto" (vllm/config/attention.py, validate_backend_before).
            members = enums[kind]
            if kind == "AttentionBackendEnum":
                choices += [*members, "auto"]
                if isinstance(value, str) and value.upper() in members:
                    value = value.upper()
            else:
                choices += [*members.values(), *members]
    if isinstance(value, str) and any(isinstance(c, int) and c == _int(value) for c in choices):
        value = _int(value)
    takes_text = "str" in kinds and key not in STRICT_CHOICES
    if isinstance(value, str) and not takes_text and value not in choices:
        value = _from_text(value, kinds)
    if value is None:
        return value, None if "None" in kinds else f"may not be empty ({annotation})"
    if choices and not takes_text and isinstance(value, str):
        if value in choices:
            return value, None
        return value, f"{value!r} is not one of {', '.join(map(str, choices))}"
    if any(_fits(kind, value) for kind in kinds):
        return value, None
    if any(choice == value and type(choice) is type(value) for choice in choices):
        return value, None  # True == 1 in Python, not to vLLM
    if any(_is_config_class(kind, literals, enums) for kind in kinds):
        return value, None  # a vLLM config class: vLLM parses the mapping or JSON itself
    return value, f"{value!r} does not fit vLLM's type {annotation}"


_BASIC = {"bool", "int", "float", "str", "None"}


def _is_config_class(kind: str, literals: Mapping[str, Any], enums: Mapping[str, Any]) -> bool:
    return not (
        kind in _BASIC
        or kind in literals
        or kind in enums
        or kind.startswith(("Literal[", "list", "set", "dict"))
    )


def _fits(kind: str, value: Any) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind.startswith(("list[", "set[")) or kind in ("list", "set"):
        return isinstance(value, list)
    if kind.startswith("dict[") or kind == "dict":
        return isinstance(value, dict)
    return False


def _int(text: str) -> int | None:
    return int(text) if text.strip().lstrip("-").isdigit() else None


def _from_text(text: str, kinds: list[str]) -> Any:
    lowered = text.strip().lower()
    if "bool" in kinds and lowered in ("true", "false"):
        return lowered == "true"
    if "None" in kinds and lowered in ("none", "null"):
        return None
    for kind, convert in (("int", int), ("float", float)):
        if kind in kinds:
            try:
                return convert(text)
            except ValueError:
                continue
    return text


def _alternatives(annotation: str) -> list[str]:
    """Top-level members of a ``A | B[C | D] | None`` union, and of ``Optional[...]``."""
    parts, depth, current = [], 0, ""
    for char in annotation:
        depth += char == "["
        depth -= char == "]"
        if char == "|" and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    expanded = []
    for part in parts:
        if part.startswith("Optional[") and part.endswith("]"):
            expanded += [*_alternatives(part[len("Optional[") : -1]), "None"]
        else:
            expanded.append(part)
    return expanded


def section_problems(serving: Any) -> list[tuple[str, str, Any]]:
    """(setting path, message, value) for every engine option problem of the Serving section:
    each side's merged options, their agreement, and the scheduler's limits."""
    found: dict[str, tuple[str, str, Any]] = {}
    merged = {}
    for role in ("prefill", "decode"):
        side = serving.engine(role).engine_options
        options = {**serving.engine_options, **side}
        merged[role], side_problems = problems(options)
        side_problems += scheduler_problems(merged[role], serving.max_model_len)
        side_problems += loader_problems(merged[role], serving.model.s3_uri)
        for key, message in side_problems:
            where = f"serving.{role}" if key in side else "serving"
            path = f"{where}.engine_options.{key}"
            found.setdefault(path, (path, message, options.get(key)))
    for key, message in mismatches(merged["prefill"], merged["decode"]):
        path = f"serving.decode.engine_options.{key}"
        found.setdefault(path, (path, message, merged["decode"].get(key)))
    return list(found.values())
