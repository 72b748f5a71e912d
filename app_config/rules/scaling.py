"""The latency policy's settings against the rest: objectives it needs, the GPU budget against the
sides' bounds, objectives a client can never measure because of stream batching.

serving.scaling (app_config/scaling.py) is read by serve_extensions/latency_policy.py through the
policy's arguments in the Serve config (serving_manifests/serve_config.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.node_labels import GPU_ROLES
from app_config.rules import WARNING, Rule
from catalog.ray_llm_image import RAY, RAY_STREAM_BATCHING_INTERVAL_MS

if TYPE_CHECKING:
    from app_config.model import Settings

_SERVING = frozenset({"serving"})
_SERVING_AND_NODES = frozenset({"serving", "gpu_nodes"})


def stream_batching_interval_ms(settings: Settings) -> float:
    """The interval decode's Ray Serve LLM server gathers streamed tokens over: the setting, or
    Ray 2.58's default (llm/_internal/serve/constants.py MODEL_RESPONSE_BATCH_TIMEOUT_MS)."""
    interval = settings.serving.stream_batching_interval_ms
    return RAY_STREAM_BATCHING_INTERVAL_MS if interval is None else interval


def objectives_needed(settings: Settings) -> list[Finding]:
    """The latency policy sizes prefill to the TTFT objective and decode to the ITL objective:
    without either it would have nothing to size that side to."""
    scaling = settings.serving.scaling
    if scaling.policy != "latency":
        return []
    return [
        Finding(
            f"serving.scaling.{name}",
            f"required with policy 'latency': it sizes {side} to this objective (give "
            "percentile and value_ms, e.g. from `pdctl bench`: docs/operating.md, 'Scaling "
            "to latency objectives'), or use policy 'queue'",
        )
        for name, side in (("ttft", "prefill"), ("itl", "decode"))
        if getattr(scaling, name) is None
    ]


def objectives_unused(settings: Settings) -> list[Finding]:
    """Objectives and a budget under the queue policy change nothing that is deployed."""
    scaling = settings.serving.scaling
    if scaling.policy == "latency":
        return []
    return [
        Finding(
            f"serving.scaling.{name}",
            "has no effect with policy 'queue' (each side scales on its own requests in "
            "flight); set policy: latency to scale to it, or remove it",
        )
        for name in ("ttft", "itl", "gpu_budget")
        if getattr(scaling, name) is not None
    ]


def gpu_budget_problems(settings: Settings) -> list[Finding]:
    """The budget must hold what the sides can never go below: decode's min_replicas and at
    least one prefill replica (decode hands every request to prefill first: Ray 2.58
    PDDecodeServer, prefill_decode/pd_server.py, so with no room for one nothing is answered),
    each a whole DP group of replica_gpus GPUs."""
    budget = settings.serving.scaling.gpu_budget
    if budget is None or settings.serving.scaling.policy != "latency":
        return []
    sides = {role: settings.side(role) for role in GPU_ROLES}
    floor = sum(max(side.engine.min_replicas, 1) * side.replica_gpus for side in sides.values())
    if budget < floor:
        parts = " + ".join(
            f"{max(side.engine.min_replicas, 1)} {role} x {side.replica_gpus}"
            for role, side in sides.items()
        )
        return [
            Finding(
                "serving.scaling.gpu_budget",
                f"{budget} GPUs cannot hold the replicas the sides never go below ({parts} = "
                f"{floor} GPUs: decode's min_replicas and one prefill replica, which every "
                f"request passes through; whole DP groups); use at least {floor}",
                budget,
            )
        ]
    return []


def gpu_budget_unused(settings: Settings) -> list[Finding]:
    """A budget at or above both sides' max_replicas never binds."""
    budget = settings.serving.scaling.gpu_budget
    if budget is None or settings.serving.scaling.policy != "latency":
        return []
    ceiling = sum(
        settings.side(role).engine.max_replicas * settings.side(role).replica_gpus
        for role in GPU_ROLES
    )
    if budget >= ceiling:
        return [
            Finding(
                "serving.scaling.gpu_budget",
                f"never binds: both sides' max_replicas hold at most {ceiling} GPUs together; "
                f"lower it below {ceiling} or remove it",
                budget,
            )
        ]
    return []


def ttft_after_stream_batching(settings: Settings) -> list[Finding]:
    """Ray Serve LLM 2.58's Batcher (llm/_internal/serve/utils/batcher.py) yields its first batch
    only after a whole interval, so every first token reaches the client at least one stream
    batching interval after decode made it: a TTFT objective at or below it never holds."""
    ttft = settings.serving.scaling.ttft
    interval = stream_batching_interval_ms(settings)
    if settings.serving.scaling.policy != "latency" or ttft is None or ttft.value_ms > interval:
        return []
    return [
        Finding(
            "serving.scaling.ttft.value_ms",
            f"{ttft.value_ms:g} ms can never hold: decode's stream batching ({RAY}) delays "
            f"every first token by up to {interval:g} ms (serving.stream_batching_interval_ms"
            "); raise the objective above it or lower the interval",
            ttft.value_ms,
        )
    ]


def itl_under_stream_batching(settings: Settings) -> list[Finding]:
    """With stream batching a client receives tokens in bundles one interval apart: it measures
    ITL near 0 inside a bundle and near the interval between bundles (`pdctl bench` on real
    engines: ITL p50 0.01 ms, p99 51-57 ms at Ray's 50 ms, docs/gpu-bench/
    2026-12-02-h200-qwen3-8b-deployed.json). The policy reads decode's own step time, so an
    ITL objective below the interval holds on the replicas but not in the client's figures."""
    itl = settings.serving.scaling.itl
    interval = stream_batching_interval_ms(settings)
    if settings.serving.scaling.policy != "latency" or itl is None or itl.value_ms >= interval:
        return []
    return [
        Finding(
            "serving.scaling.itl.value_ms",
            f"{itl.value_ms:g} ms is below decode's stream batching interval ({interval:g} ms): "
            "the policy holds it on decode's steps, but clients receive tokens in bundles one "
            "interval apart and their high ITL percentiles read near the interval; compare "
            "`pdctl bench` TPOT with it, or set serving.stream_batching_interval_ms lower",
            itl.value_ms,
        )
    ]


def nothing_to_scale(settings: Settings) -> list[Finding]:
    """With min_replicas equal to max_replicas on both sides no policy has anything to decide."""
    if settings.serving.scaling.policy != "latency":
        return []
    engines = [settings.serving.engine(role) for role in GPU_ROLES]
    if all(engine.min_replicas == engine.max_replicas for engine in engines):
        return [
            Finding(
                "serving.scaling.policy",
                "'latency' has nothing to decide: both sides have min_replicas equal to "
                "max_replicas; widen a side's bounds or use policy 'queue'",
                "latency",
            )
        ]
    return []


RULES = (
    Rule("latency-objectives", _SERVING, objectives_needed),
    Rule("scaling-unused", _SERVING, objectives_unused, WARNING, stack="serving"),
    Rule("gpu-budget", _SERVING_AND_NODES, gpu_budget_problems),
    Rule("gpu-budget-unused", _SERVING_AND_NODES, gpu_budget_unused, WARNING, stack="serving"),
    Rule("ttft-stream-batching", _SERVING, ttft_after_stream_batching),
    Rule("itl-stream-batching", _SERVING, itl_under_stream_batching, WARNING, stack="serving"),
    Rule("latency-nothing-to-scale", _SERVING, nothing_to_scale, WARNING, stack="serving"),
)
