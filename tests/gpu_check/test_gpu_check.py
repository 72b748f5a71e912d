"""The pure parts of `make gpu-check` (the real-engine tier runs on a GPU, not here): the model's
scale-down keeps what decides the engine's code paths, the one-GPU changes are exactly the listed
ones, and the result files, the docs' record and the metric reading agree with a real run."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from catalog.metrics import NIXL_FAILED_TRANSFERS, SCRAPED, PrometheusMetric
from pdctl.verify import kv_verdict, transfer_evidence
from serving_manifests.serve_config import render_serve_config
from tests.configurations import settings_for
from tests.conftest import Synthesized
from tools.gpu_check.__main__ import chat_parsers
from tools.gpu_check.deployed import DeployedRayService
from tools.gpu_check.one_gpu import one_gpu_serve_config, vllm_cli_args
from tools.gpu_check.results import Run, markdown_report
from tools.gpu_check.scale_down import (
    EXPERTS,
    LAYERS,
    ScaleDownError,
    is_moe,
    kv_bytes_per_token,
    scale_down,
)
from tools.gpu_check.serve_app import metric_presence, one_gpu_worker_resources
from tools.gpu_check.tiny_model import CHAT_TEMPLATE, chat_prompt

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "catalog/model_configs").glob("*.json"))
CAPTURED = ROOT / "tests/data/gpu_check"
RESULTS = sorted((ROOT / "docs/gpu-check").glob("*.json"))
VOCAB = 4096


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _per_layer_kv(config: Mapping[str, Any]) -> int:
    return kv_bytes_per_token(config) // int(config["num_hidden_layers"])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_scaled_down_model_keeps_what_decides_the_engines_code_paths(path: Path) -> None:
    config = _load(path)
    small, notes = scale_down(config, vocab_size=VOCAB)
    assert small["architectures"] == config["architectures"]
    assert small["model_type"] == config["model_type"]
    assert small["num_hidden_layers"] == LAYERS < config["num_hidden_layers"]
    assert small["vocab_size"] == VOCAB
    assert "quantization_config" not in small
    assert "auto_map" not in small
    if "kv_lora_rank" in config:  # MLA: one latent per token per layer, unchanged (576 for V3)
        assert _per_layer_kv(small) == _per_layer_kv(config)
        assert small["q_lora_rank"] == config["q_lora_rank"]
    else:  # GQA: the group size and head_dim, so the same kernels and KV layout per head
        group = config["num_attention_heads"] // config["num_key_value_heads"]
        assert small["num_attention_heads"] // small["num_key_value_heads"] == group
        assert small["head_dim"] == config.get(
            "head_dim", config["hidden_size"] // config["num_attention_heads"]
        )
        assert small["hidden_size"] == small["num_attention_heads"] * small["head_dim"]
    assert is_moe(small) == is_moe(config)
    if is_moe(config):
        key = next(k for k in ("num_experts", "n_routed_experts") if k in config)
        assert 1 < small[key] <= EXPERTS
        assert 1 <= small["num_experts_per_tok"] <= small[key]
    if "first_k_dense_replace" in config:  # DeepSeek: a dense layer and an MoE layer both run
        assert 0 < small["first_k_dense_replace"] < small["num_hidden_layers"]
    if "n_group" in config:  # grouped routing must still be satisfiable
        assert small[key] % small["n_group"] == 0
        assert small["topk_group"] <= small["n_group"]
        per_group = small[key] // small["n_group"]
        assert small["num_experts_per_tok"] <= per_group * small["topk_group"]
    for note in notes:  # every line names a real change
        setting = note.split(":", 1)[0]
        assert small.get(setting) != config.get(setting), note


def test_a_sliding_window_pattern_keeps_a_layer_of_every_kind() -> None:
    pattern = ["sliding_attention"] * 5 + ["full_attention"]
    config = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "hidden_size": 2048,
        "layer_types": pattern,
        "sliding_window": 512,
    }
    small, _ = scale_down(config, vocab_size=VOCAB)
    assert set(small["layer_types"]) == set(pattern)
    assert small["num_hidden_layers"] == len(small["layer_types"]) == 6
    assert small["sliding_window"] == 512


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "llama"}, "no architectures"),
        (
            {"architectures": ["X"], "model_type": "x", "text_config": {}},
            "multimodal",
        ),
        (
            {
                "architectures": ["X"],
                "model_type": "x",
                "num_hidden_layers": 4,
                "num_attention_heads": 6,
                "num_key_value_heads": 4,
                "hidden_size": 96,
            },
            "not a multiple",
        ),
    ],
)
def test_configurations_it_cannot_reproduce_are_refused(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScaleDownError, match=message):
        scale_down(config, vocab_size=VOCAB)


# The MoE example gpu-check runs (`make gpu-check CONFIG=examples/deepseek-v3-pd.yaml`): data
# parallel ranks with expert parallel per side.
MOE_EXAMPLE = "deepseek-v3-pd"
# EPLB with redundant experts on both sides, the settings one GPU cannot hold.
EPLB = {
    f"serving.{side}.eplb": '{"enabled": true, "num_redundant_experts": 32}'
    for side in ("prefill", "decode")
}


@pytest.fixture(scope="module")
def deployed(synthesize: Callable[[str], Synthesized]) -> DeployedRayService:
    return DeployedRayService.read(synthesize("default").outdir)


@pytest.fixture(scope="module", params=["default", MOE_EXAMPLE, "eplb"])
def any_deployed(
    request: pytest.FixtureRequest, synthesize: Callable[..., Synthesized]
) -> DeployedRayService:
    if request.param == "eplb":
        return DeployedRayService.read(synthesize(MOE_EXAMPLE, EPLB).outdir)
    return DeployedRayService.read(synthesize(request.param).outdir)


def _vllm_refusal(kwargs: Mapping[str, Any]) -> str | None:
    """vLLM 0.26.0's expert-parallel rules for one engine (vllm/config/parallel.py,
    ParallelConfig._validate_parallel_config; prefill-context parallel is never set here)."""
    ranks = int(kwargs.get("tensor_parallel_size", 1)) * int(kwargs.get("data_parallel_size", 1))
    if kwargs.get("enable_eplb"):
        if not kwargs.get("enable_expert_parallel"):
            return "enable_expert_parallel must be True to use EPLB."
        if ranks <= 1:
            return "EPLB requires tensor, prefill-context, or data parallelism"
    elif (kwargs.get("eplb_config") or {}).get("num_redundant_experts", 0):
        return "num_redundant_experts is set but EPLB is not enabled"
    return None


def _sides(serve_config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    (application,) = serve_config["applications"]
    return {side: application["args"][f"{side}_config"] for side in ("prefill", "decode")}


def _paths(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        found: dict[str, Any] = {}
        for key, item in value.items():
            found.update(_paths(item, f"{prefix}.{key}" if prefix else str(key)))
        return found
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return {
            k: v for i, item in enumerate(value) for k, v in _paths(item, f"{prefix}[{i}]").items()
        }
    return {prefix: value}


@pytest.mark.parametrize("efa", [True, False])
def test_the_checked_serve_config_differs_from_the_synthesized_one_only_where_it_says(
    any_deployed: DeployedRayService, efa: bool
) -> None:
    deployed = any_deployed
    original = deployed.serve_config
    local, changes = one_gpu_serve_config(original, "/models/small", efa=efa, http_port=18000)
    before, after = _paths(original), _paths(local)
    differing = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    listed = {change.setting for change in changes}
    assert {key.removeprefix("applications[0].args.") for key in differing} == listed
    for change in changes:
        assert change.reason
    backends = {
        value[0]
        for key, value in after.items()
        if key.endswith("kv_connector_extra_config.backends")
    }
    assert backends == ({"LIBFABRIC"} if efa else {"UCX"})
    for side in ("prefill", "decode"):
        kwargs = local["applications"][0]["args"][f"{side}_config"]["engine_kwargs"]
        assert kwargs["tensor_parallel_size"] == 1
        assert (
            kwargs["block_size"]
            == deployed.serve_config["applications"][0]["args"][f"{side}_config"]["engine_kwargs"][
                "block_size"
            ]
        )


@pytest.mark.parametrize("efa", [True, False])
def test_a_prefill_offload_tier_keeps_its_place_and_shrinks_to_the_one_gpu(efa: bool) -> None:
    """With serving.prefill.kv_offload_gib_per_gpu the one-GPU config changes NIXL's backend
    inside the MultiConnector and the tier's buffer to the one GPU the rank keeps, and lists
    exactly those changes."""
    settings = settings_for("default", **{"serving.prefill.kv_offload_gib_per_gpu": "4"})
    original = render_serve_config(settings)
    local, changes = one_gpu_serve_config(original, "/models/small", efa=efa, http_port=18000)
    before, after = _paths(original), _paths(local)
    differing = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    assert {key.removeprefix("applications[0].args.") for key in differing} == {
        change.setting for change in changes
    }
    transfer = _sides(local)["prefill"]["engine_kwargs"]["kv_transfer_config"]
    nixl, tier = transfer["kv_connector_extra_config"]["connectors"]
    assert nixl["kv_connector_extra_config"]["backends"] == (["LIBFABRIC"] if efa else ["UCX"])
    assert tier["kv_connector_extra_config"]["cpu_bytes_to_use"] == 4 * 2**30  # one GPU's share
    assert settings.side("prefill").rank_gpus > 1  # the change is what this test is about


def test_the_moe_example_keeps_expert_parallel_and_runs_one_rank_per_side(
    synthesize: Callable[..., Synthesized],
) -> None:
    original = DeployedRayService.read(synthesize(MOE_EXAMPLE).outdir).serve_config
    local, changes = one_gpu_serve_config(original, "/models/small", efa=False, http_port=18000)
    reasons = {change.setting: change.reason for change in changes}
    for side, llm in _sides(local).items():
        deployed = _sides(original)[side]["engine_kwargs"]
        kwargs = llm["engine_kwargs"]
        assert deployed["data_parallel_size"] > 1  # the example is what this test is about
        assert deployed["enable_expert_parallel"] is True
        assert kwargs["data_parallel_size"] == kwargs["tensor_parallel_size"] == 1
        assert "Duplicate GPU" in reasons[f"{side}_config.engine_kwargs.data_parallel_size"]
        for key in ("enable_expert_parallel", "all2all_backend"):
            assert kwargs[key] == deployed[key], key
        assert _vllm_refusal(kwargs) is None


def test_the_tokenizer_is_built_for_the_parsers_the_deployed_engines_name(
    synthesize: Callable[..., Synthesized],
) -> None:
    serve_config = DeployedRayService.read(synthesize(MOE_EXAMPLE).outdir).serve_config
    assert chat_parsers(serve_config) == {"tool_call_parser": "deepseek_v3"}


def test_eplb_is_turned_off_with_its_redundant_experts_and_nothing_else_of_it(
    synthesize: Callable[..., Synthesized],
) -> None:
    original = DeployedRayService.read(synthesize(MOE_EXAMPLE, EPLB).outdir).serve_config
    local, changes = one_gpu_serve_config(original, "/models/small", efa=False, http_port=18000)
    reasons = {change.setting: change.reason for change in changes}
    for side, llm in _sides(local).items():
        deployed = _sides(original)[side]["engine_kwargs"]
        kwargs = llm["engine_kwargs"]
        assert deployed["enable_eplb"] is True
        # Only dropping the ranks would leave a config vLLM refuses: each change is needed.
        one_rank = {**deployed, "tensor_parallel_size": 1, "data_parallel_size": 1}
        assert "EPLB requires" in (_vllm_refusal(one_rank) or "")
        assert _vllm_refusal({**one_rank, "enable_eplb": False}) is not None
        assert _vllm_refusal(kwargs) is None
        assert kwargs["enable_eplb"] is False
        assert kwargs["eplb_config"] == {**deployed["eplb_config"], "num_redundant_experts": 0}
        assert "EPLB requires" in reasons[f"{side}_config.engine_kwargs.enable_eplb"]
        setting = f"{side}_config.engine_kwargs.eplb_config.num_redundant_experts"
        assert "not enabled" in reasons[setting]


def test_each_side_keeps_its_own_resource_on_a_one_gpu_node(deployed: DeployedRayService) -> None:
    resources, changes = one_gpu_worker_resources(
        {role: deployed.worker_resources(role) for role in ("prefill", "decode")}
    )
    assert resources == {"prefill": {"prefill": 1.0}, "decode": {"decode": 1.0}}
    bundles = {
        side: deployed.serve_config["applications"][0]["args"][f"{side}_config"][
            "placement_group_config"
        ]["bundle_per_worker"]
        for side in ("prefill", "decode")
    }
    for side, bundle in bundles.items():  # one bundle (TP 1) fits only its own side's node
        assert bundle[side] <= resources[side][side]
        other = "decode" if side == "prefill" else "prefill"
        assert side not in resources[other]
    assert len(changes) == 2


def test_engine_kwargs_become_the_flags_vllm_serve_takes() -> None:
    flags = vllm_cli_args(
        {
            "block_size": 128,
            "kv_transfer_config": {"kv_connector": "NixlConnector"},
            "enable_prefix_caching": False,
            "enforce_eager": True,
        }
    )
    assert flags == [
        "--block-size",
        "128",
        "--kv-transfer-config",
        '{"kv_connector": "NixlConnector"}',
        "--no-enable-prefix-caching",
        "--enforce-eager",
    ]


def test_the_chat_prompt_is_what_the_chat_template_renders() -> None:
    rendered = jinja2.Template(CHAT_TEMPLATE).render(
        messages=[{"role": "user", "content": "hello P/D"}], add_generation_prompt=True
    )
    assert rendered == chat_prompt("hello P/D")


def _captured() -> list[str]:
    return [path.read_text() for path in sorted(CAPTURED.glob("metrics-*.txt"))]


def test_every_metric_the_dashboard_reads_was_exported_by_the_real_serve_application() -> None:
    presence = metric_presence(_captured())
    assert set(presence) == {metric.name for metric in SCRAPED}
    assert "absent" not in presence.values()
    # Ray exports a counter only after its first increment: no transfer failed in that run.
    assert presence[NIXL_FAILED_TRANSFERS.name].startswith("absent until its first increment")


def test_ray_names_a_vllm_counter_as_the_alerts_query_it() -> None:
    """The failed-transfers counter was never incremented in the real run, so its own name could
    not be seen; a vLLM counter that did count shows Ray's rule: vllm:x -> ray_vllm_x_total, the
    name PrometheusMetric.stored_name gives every counter the alerts read."""
    success = PrometheusMetric("ray_vllm_request_success", "counter", "", "")
    families = {
        family.name: family
        for family in text_string_to_metric_families((CAPTURED / "metrics-decode.txt").read_text())
    }
    (sample,) = families["ray_vllm_request_success"].samples
    assert sample.name == success.stored_name
    assert sample.value > 0
    assert NIXL_FAILED_TRANSFERS.stored_name == "ray_vllm_nixl_num_failed_transfers_total"


def test_pdctl_verify_reads_the_real_decode_metrics_as_transfers() -> None:
    decode = (CAPTURED / "metrics-decode.txt").read_text()
    evidence = transfer_evidence([decode])
    assert evidence.seen
    assert evidence.transfers > 0
    assert evidence.failed_transfers == 0
    assert kv_verdict(evidence, "UCX").ok


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.stem)
def test_recorded_runs_name_where_and_what_ran(path: Path) -> None:
    run = Run.read(path)
    assert run.gpu
    assert run.date
    assert run.architecture
    assert run.checks
    assert set(run.versions) == {"vllm", "ray", "nixl-cu13", "torch"}


def test_the_docs_record_of_real_engine_runs_is_generated_from_the_result_files() -> None:
    page = (ROOT / "docs/verification.md").read_text()
    assert markdown_report(Run.read(path) for path in RESULTS) in page
