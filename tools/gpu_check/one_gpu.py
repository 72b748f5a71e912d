"""The deployed Serve config, changed only where one GPU forces it.

Everything else (the builder, the connector, kv_role, block size, autoscaling and routing
options, health checks, drains, expert parallel and its all-to-all backend, placement
strategy and bundle shape) is what
``cdk synth`` wrote into cdk.out. Each change is returned as a line, and the run prints them, so
a reader sees exactly how far the checked configuration is from the deployed one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app_config.node_labels import GPU_ROLES
from serving_manifests.serve_config import nixl_connector, offload_connector

LOOPBACK = "127.0.0.1"
# Two engines share the GPU: each takes this share of its memory (a small model leaves most of it
# to the KV cache, which is what NIXL moves).
MEMORY_SHARE = 0.35
MAX_MODEL_LEN = 2048
# Each side becomes one engine of one rank on the one GPU. What the deployed config asks beyond
# that, and why one GPU cannot hold it (vLLM 0.26.0 and NCCL sources). enable_expert_parallel
# and all2all_backend stay as deployed: vLLM accepts them at one rank (see docs/verification.md
# for what they then change).
ONE_RANK = {
    "tensor_parallel_size": "one GPU: vLLM gives each tensor-parallel rank its own GPU",
    "pipeline_parallel_size": "one GPU: vLLM gives each pipeline stage its own GPU",
    "data_parallel_size": (
        "one GPU hosts one DP rank: a DP group's ranks join NCCL communicators, and NCCL refuses "
        "two ranks on one GPU (init.cc: 'Duplicate GPU detected', ncclInvalidUsage)"
    ),
}
EPLB_OFF = (
    "vLLM ParallelConfig refuses EPLB at one rank: the EP group spans TP x PCP x DP ranks "
    "('EPLB requires tensor, prefill-context, or data parallelism', config/parallel.py)"
)
REDUNDANT_EXPERTS_OFF = (
    "vLLM ParallelConfig refuses redundant experts without EPLB "
    "('num_redundant_experts is set ... but EPLB is not enabled', config/parallel.py)"
)


@dataclass(frozen=True)
class Change:
    setting: str
    deployed: Any
    local: Any
    reason: str

    def __str__(self) -> str:
        return f"{self.setting}: {self.deployed!r} -> {self.local!r} ({self.reason})"


def one_gpu_serve_config(
    serve_config: Mapping[str, Any], model_path: str, *, efa: bool, http_port: int
) -> tuple[dict[str, Any], list[Change]]:
    config = copy.deepcopy(dict(serve_config))
    changes: list[Change] = []

    def change(holder: dict[str, Any], key: str, value: Any, setting: str, reason: str) -> None:
        if holder.get(key) != value:
            changes.append(Change(setting, holder.get(key), value, reason))
            holder[key] = value

    change(config.setdefault("http_options", {}), "host", LOOPBACK, "http_options.host", "local")
    change(config["http_options"], "port", http_port, "http_options.port", "a free local port")
    (application,) = config["applications"]
    for role in GPU_ROLES:
        llm = application["args"][f"{role}_config"]
        prefix = f"{role}_config"
        kwargs = llm["engine_kwargs"]
        rank_gpus = int(kwargs.get("tensor_parallel_size", 1)) * int(
            kwargs.get("pipeline_parallel_size", 1)
        )
        for key, reason in ONE_RANK.items():
            if key in kwargs:
                change(kwargs, key, 1, f"{prefix}.engine_kwargs.{key}", reason)
        if kwargs.get("enable_eplb"):
            change(kwargs, "enable_eplb", False, f"{prefix}.engine_kwargs.enable_eplb", EPLB_OFF)
        eplb = kwargs.get("eplb_config") or {}
        if not kwargs.get("enable_eplb") and eplb.get("num_redundant_experts"):
            change(
                eplb,
                "num_redundant_experts",
                0,
                f"{prefix}.engine_kwargs.eplb_config.num_redundant_experts",
                REDUNDANT_EXPERTS_OFF,
            )
        change(
            kwargs,
            "max_model_len",
            min(int(kwargs.get("max_model_len", MAX_MODEL_LEN)), MAX_MODEL_LEN),
            f"{prefix}.engine_kwargs.max_model_len",
            "the small model's KV budget",
        )
        change(
            kwargs,
            "gpu_memory_utilization",
            MEMORY_SHARE,
            f"{prefix}.engine_kwargs.gpu_memory_utilization",
            "prefill and decode share one GPU",
        )
        transfer = kwargs["kv_transfer_config"]
        if not efa:
            nixl, path = nixl_connector(transfer)
            change(
                nixl.setdefault("kv_connector_extra_config", {}),
                "backends",
                ["UCX"],
                f"{prefix}.engine_kwargs.kv_transfer_config{path}.kv_connector_extra_config."
                "backends",
                "no EFA device: NIXL's LIBFABRIC backend cannot start (NIXL_ERR_NOT_FOUND)",
            )
        offload = offload_connector(transfer)
        if offload is not None and rank_gpus > 1:
            tier, path = offload
            extra = tier["kv_connector_extra_config"]
            change(
                extra,
                "cpu_bytes_to_use",
                int(extra["cpu_bytes_to_use"]) // rank_gpus,
                f"{prefix}.engine_kwargs.kv_transfer_config{path}.kv_connector_extra_config."
                "cpu_bytes_to_use",
                "the KV offload tier is sized per GPU (serving.<side>.kv_offload_gib_per_gpu) "
                "and the rank now has one",
            )
        loading = llm["model_loading_config"]
        change(
            loading,
            "model_source",
            model_path,
            f"{prefix}.model_loading_config.model_source",
            "the scaled-down model, built locally",
        )
        autoscaling = llm["deployment_config"].get("autoscaling_config", {})
        for key in ("min_replicas", "max_replicas", "initial_replicas"):
            if key in autoscaling:
                change(
                    autoscaling,
                    key,
                    1,
                    f"{prefix}.deployment_config.autoscaling_config.{key}",
                    "one replica per side fits one GPU",
                )
    return config, changes


def engine_kwargs(serve_config: Mapping[str, Any], role: str) -> dict[str, Any]:
    """A side's engine arguments, as the deployed (changed) config gives them to vLLM."""
    (application,) = serve_config["applications"]
    return copy.deepcopy(application["args"][f"{role}_config"]["engine_kwargs"])


def served_model(serve_config: Mapping[str, Any]) -> tuple[str, str]:
    """(model_id clients name, the path the engines load)."""
    (application,) = serve_config["applications"]
    loading = application["args"]["decode_config"]["model_loading_config"]
    return loading["model_id"], loading["model_source"]


def vllm_cli_args(kwargs: Mapping[str, Any]) -> list[str]:
    """``vllm serve`` flags for engine kwargs: the same names with dashes; dicts as JSON."""
    import json

    args: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{key.replace('_', '-')}")
        elif isinstance(value, dict | list):
            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return args
