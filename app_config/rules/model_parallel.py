"""What the model's config.json allows of a side's parallel layout, by vLLM 0.26's own checks:
the attention heads and KV heads over tensor parallel, experts for expert parallel and for data
parallel, experts over the EPLB ranks. Each rule is one function of (the config, where it came
from, the side), so that synth (the rules below, whenever the config is known:
app_config/rules/model_fit.py model_config) and `pdctl plan` (its --model-config, on the side
its options make) apply the same function.

Of vLLM's checks of the parallel config against the model (vllm/config/model.py
ModelConfig.verify_with_parallel_config and what it calls), those not here:
- decode context parallel against the KV heads: the app owns decode_context_parallel_size and
  keeps it 1 (app_config/engine_options.py OWNED);
- mm_tensor_ipc 'torch_shm' with more than one GPU: a settings-only relation of the engine
  options, not the model's.
More pipeline stages than layers is not refused by vLLM (distributed/utils.py get_pp_indices
gives a stage no layers), so nothing here refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from app_config.errors import Finding
from app_config.rules import Rule
from catalog.model_architecture import text_config
from catalog.pipeline_parallel import pipeline_parallel_class
from catalog.ray_llm_image import VLLM

if TYPE_CHECKING:
    from app_config.model import Settings
    from app_config.side import Side

# vLLM 0.26 transformers_utils/model_arch_config_convertor.py get_num_experts: the first of these
# the config has (getattr_iter), else the largest n_routed_experts of its MoE block_configs.
_EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
# ... get_total_num_kv_heads: the first of these the config has, else the attention heads.
_KV_HEAD_KEYS = (
    "n_head_kv",
    "num_kv_heads",
    "num_key_value_heads",
    "multi_query_group_num",
    "num_attention_groups",
)


def _text(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of the config (hf_text_config): multimodal configs nest it."""
    return text_config(config)


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def vllm_num_experts(config: dict[str, Any]) -> int:
    """Routed experts per MoE layer as vLLM 0.26 counts them (ModelConfig.is_moe is this > 0):
    model_arch_config_convertor.py get_num_experts."""
    text = _text(config)
    key = next((key for key in _EXPERT_KEYS if key in text), None)
    experts = text.get(key) if key else None
    if isinstance(experts, list):  # Ernie VL writes one count per layer, all equal
        experts = experts[0] if experts else None
    if _whole(experts):
        return int(experts)
    blocks = text.get("block_configs")
    if not isinstance(blocks, list):
        return 0
    counts = [
        _whole(block.get("n_routed_experts")) or 0
        for block in blocks
        if isinstance(block, dict) and block.get("block_type") == "moe"
    ]
    return max(counts, default=0)


def _heads(config: dict[str, Any]) -> tuple[int | None, int | None]:
    """(attention heads, KV heads) as vLLM 0.26 reads them for the split over TP, None where
    the config does not say (vLLM's default of 0 heads passes its check). KV heads are None for
    multi-head latent attention (kv_lora_rank): its latent is whole on every rank."""
    text = _text(config)
    heads = _whole(text.get("num_attention_heads"))
    if text.get("kv_lora_rank") is not None:
        return heads, None
    key = next((key for key in _KV_HEAD_KEYS if key in text), None)
    kv_heads = _whole(text.get(key)) if key else heads
    return heads, kv_heads


def _heads_allow(tp: int, heads: int | None, kv_heads: int | None) -> bool:
    if heads and heads % tp:
        return False
    if kv_heads:
        return (tp % kv_heads if tp >= kv_heads else kv_heads % tp) == 0
    return True


def _fitting_tensor_parallel(config: dict[str, Any], side: Side) -> list[int]:
    """The TPs both head rules accept that also divide the side's GPUs of a node at its PP:
    what the message offers instead."""
    heads, kv_heads = _heads(config)
    gpus, pp = side.gpus_per_node, side.pipeline_parallel
    return [
        tp
        for tp in range(1, gpus // pp + 1)
        if gpus % tp == 0 and _heads_allow(tp, heads, kv_heads)
    ]


def _valid(config: dict[str, Any], side: Side) -> str:
    """TP 1 always splits the heads, so there is one whenever TP x PP fits the node at all
    (the replica-fit rule's own finding otherwise)."""
    return (
        f"use one of {_fitting_tensor_parallel(config, side)}: the TPs that split the model's "
        f"heads and divide the {side.gpus_per_node} GPUs of a node at PP "
        f"{side.pipeline_parallel}"
    )


def tensor_parallel_divides_heads(
    config: dict[str, Any], source: str, side: Side
) -> Iterator[Finding]:
    """vLLM 0.26 config/model.py ModelConfig.verify_with_parallel_config: 'Total number of
    attention heads (N) must be divisible by tensor parallel size (T).' A 28-head model
    (Qwen2.5-7B) at TP 8 passes the node rule (TP divides the 8 GPUs) and fails here."""
    heads, _ = _heads(config)
    tp = side.tensor_parallel
    if heads and heads % tp:
        yield Finding(
            f"{side.serving_setting}.tensor_parallel_size",
            f"TP {tp} does not divide the model's {heads} attention heads by its config.json "
            f"({source}): {VLLM} refuses the engine ('Total number of attention heads ({heads}) "
            f"must be divisible by tensor parallel size ({tp})', config/model.py "
            f"verify_with_parallel_config); {_valid(config, side)}",
            tp,
            code="model-tensor-parallel-heads",
        )


def tensor_parallel_and_kv_heads(
    config: dict[str, Any], source: str, side: Side
) -> Iterator[Finding]:
    """vLLM 0.26 model_executor/layers/linear.py QKVParallelLinear.__init__: each rank holds
    KV heads / TP of them, or with TP at or above the KV heads one head replicated TP / KV
    heads times; `divide` (distributed/utils.py) refuses a remainder either way, when the
    model's weights are built. Grouped-query models only (multi-head latent attention keeps
    its latent whole on every rank)."""
    heads, kv_heads = _heads(config)
    tp = side.tensor_parallel
    if not kv_heads or (heads and heads % tp) or _heads_allow(tp, None, kv_heads):
        return  # the attention heads' own rule speaks first
    yield Finding(
        f"{side.serving_setting}.tensor_parallel_size",
        f"TP {tp} and the model's {kv_heads} KV heads (its config.json, {source}) do not "
        f"divide one another: {VLLM} fails building the attention weights "
        f"(model_executor/layers/linear.py QKVParallelLinear, '{max(tp, kv_heads)} is not "
        f"divisible by {min(tp, kv_heads)}'); {_valid(config, side)}",
        tp,
        code="model-tensor-parallel-kv-heads",
    )


def pipeline_parallel_supported(
    config: dict[str, Any], source: str, side: Side
) -> Iterator[Finding]:
    """vLLM 0.26 config/model.py ModelConfig.verify_with_parallel_config: 'Pipeline parallelism
    is not supported for this model. Supported models implement the `SupportsPP` interface.'
    The class the config's `architectures` resolve to, and whether vLLM's `supports_pp` holds
    for it, come from vLLM's registry (catalog/pipeline_parallel.py); a class the catalog could
    not inspect is not judged."""
    pp = side.pipeline_parallel
    architectures = config.get("architectures")
    if pp <= 1 or not isinstance(architectures, list):
        return
    names = [name for name in architectures if isinstance(name, str)]
    model_impl = str(side.options.get("model_impl", "auto"))
    resolved, supported = pipeline_parallel_class(names, model_impl)
    if not supported:
        yield Finding(
            f"{side.serving_setting}.pipeline_parallel_size",
            f"is {pp}, but the model's class {resolved} (its config.json's architectures, "
            f"{source}) does not support pipeline parallel in {VLLM}: the engine refuses it "
            "('Pipeline parallelism is not supported for this model', config/model.py "
            f"verify_with_parallel_config); use 1, with a tensor_parallel_size up to the "
            f"{side.gpus_per_node} GPUs of a node",
            pp,
            code="model-pipeline-parallel-unsupported",
        )


def _no_experts(config: dict[str, Any], source: str) -> str:
    return f"the model has no experts by its config.json ({source})"


def expert_parallel_needs_experts(
    config: dict[str, Any], source: str, side: Side
) -> Iterator[Finding]:
    """vLLM 0.26 config/model.py ModelConfig._verify_with_expert_parallelism (called by
    verify_with_parallel_config when enable_expert_parallel): 'Number of experts in the model
    must be greater than 0 when expert parallelism is enabled.' EPLB needs expert parallel
    (the settings' own rule), so this covers EPLB on a dense model too."""
    if side.engine.expert_parallel and not vllm_num_experts(config):
        yield Finding(
            f"{side.serving_setting}.expert_parallel",
            f"is on, but {_no_experts(config, source)}: {VLLM} refuses the engine ('Number of "
            "experts in the model must be greater than 0 when expert parallelism is enabled', "
            "config/model.py _verify_with_expert_parallelism); set it to false",
            True,
            code="model-dense-expert-parallel",
        )


def data_parallel_needs_experts(
    config: dict[str, Any], source: str, side: Side
) -> Iterator[Finding]:
    """vLLM 0.26 engine/arg_utils.py EngineArgs.create_engine_config: data parallel with an
    external rank on a model that is not MoE is refused, and Ray Serve LLM's DPServer always
    passes data_parallel_rank (vLLM's external DP mode)."""
    if side.data_parallel > 1 and not vllm_num_experts(config):
        yield Finding(
            f"{side.serving_setting}.data_parallel_size",
            f"is {side.data_parallel}, but {_no_experts(config, source)}: {VLLM} refuses "
            "data parallel for a dense model ('Non-MoE models do not support external data "
            "parallel mode', engine/arg_utils.py create_engine_config); use 1, and replicas "
            "for more throughput",
            side.data_parallel,
            code="model-dense-data-parallel",
        )


def eplb_experts_divide(config: dict[str, Any], source: str, side: Side) -> Iterator[Finding]:
    """vLLM 0.26 model_executor/layers/fused_moe/layer.py (the MoE layer's EPLB state): with
    EPLB and expert parallel, routed + redundant experts must divide evenly over the EP group,
    TP x DP ranks (fused_moe/config.py FusedMoEParallelConfig.make), 'EPLB currently only
    supports even distribution of experts across ranks'."""
    engine, experts = side.engine, vllm_num_experts(config)
    ranks = side.tensor_parallel * side.data_parallel
    redundant = engine.eplb.num_redundant_experts
    if not (engine.eplb.enabled and engine.expert_parallel and experts) or ranks <= 1:
        return
    total = experts + redundant
    if total % ranks:
        fitting = [r for r in range(redundant, redundant + ranks) if (experts + r) % ranks == 0]
        yield Finding(
            f"{side.serving_setting}.eplb.num_redundant_experts",
            f"the model's {experts} routed experts (its config.json, {source}) + {redundant} "
            f"redundant = {total} do not divide over the {ranks} EP ranks (TP "
            f"{side.tensor_parallel} x DP {side.data_parallel}): {VLLM} refuses ('EPLB "
            "currently only supports even distribution of experts across ranks', "
            f"model_executor/layers/fused_moe/layer.py); use {fitting[0]} redundant experts, "
            "or a data_parallel_size that divides them",
            redundant,
            code="model-eplb-experts",
        )


SideRule = Callable[[dict[str, Any], str, "Side"], Iterator[Finding]]
# In the order vLLM meets them: the heads at ModelConfig, DP at the engine config, the weights
# and the experts' placement when the model is built.
SIDE_RULES: tuple[tuple[str, SideRule], ...] = (
    ("model-tensor-parallel-heads", tensor_parallel_divides_heads),
    ("model-dense-expert-parallel", expert_parallel_needs_experts),
    ("model-pipeline-parallel-unsupported", pipeline_parallel_supported),
    ("model-dense-data-parallel", data_parallel_needs_experts),
    ("model-tensor-parallel-kv-heads", tensor_parallel_and_kv_heads),
    ("model-eplb-experts", eplb_experts_divide),
)


def side_findings(config: dict[str, Any], source: str, side: Side) -> list[Finding]:
    """Every rule of this module on one side: what `pdctl plan` and the weights rule ask."""
    return [finding for _, rule in SIDE_RULES for finding in rule(config, source, side)]


def _on_every_side(rule: SideRule) -> Callable[[Settings], Iterator[Finding]]:
    def check(settings: Settings) -> Iterator[Finding]:
        from app_config.rules.model_fit import side_configs

        for side, config, source in side_configs(settings):
            yield from rule(config, source, side)

    check.__doc__ = rule.__doc__
    return check


_READS = frozenset({"serving", "gpu_nodes"})
RULES = tuple(Rule(code, _READS, _on_every_side(rule)) for code, rule in SIDE_RULES)
