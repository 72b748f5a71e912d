"""The model's rules of a side's parallel layout (app_config/rules/model_parallel.py), each once,
as a table: a configuration and the model's config.json (bundled, or a bundled one with some
counts changed) -> the finding it must give, or none. tests/e2e/test_model_parallel_vllm.py
hands the same rows to vLLM 0.26's own checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app_config import ConfigError
from app_config.rules import evaluate
from app_config.rules import model_parallel as rule
from catalog.models import MODEL_CONFIGS
from catalog.pipeline_parallel import (
    PIPELINE_PARALLEL_FILE,
    TRANSFORMERS_BACKEND,
    pipeline_parallel_class,
)
from tests.configurations import settings_for

CODES = {code for code, _ in rule.SIDE_RULES}
BOTH = ("serving.prefill", "serving.decode")


def model(name: str, **counts: Any) -> dict[str, Any]:
    """A bundled config.json (catalog/model_configs), with these fields changed."""
    return json.loads((MODEL_CONFIGS / name).read_text()) | counts


# The counts of real models the bundle does not hold, on Qwen3-8B's config (model_type qwen3):
# Qwen2.5-7B's 28 attention heads and 4 KV heads, Phi-3-medium's 40 and 10, Qwen3-14B's 40
# and 8 (their Hugging Face config.json files).
HEADS_28 = model("Qwen3-8B.json", num_attention_heads=28, num_key_value_heads=4)
HEADS_40_KV_10 = model("Qwen3-8B.json", num_attention_heads=40, num_key_value_heads=10)
HEADS_40 = model("Qwen3-8B.json", num_attention_heads=40, num_key_value_heads=8)
DEEPSEEK_V3 = model("DeepSeek-V3.json")
QWEN3_30B_A3B = model("Qwen3-30B-A3B.json")
QWEN3_32B = model("Qwen3-32B.json")
# Qwen3-8B's counts under the class of Gemma 3n's text model, which vLLM 0.26 registers without
# pipeline parallel (catalog/vllm_pipeline_parallel.json).
WITHOUT_PP = model("Qwen3-8B.json", architectures=["Gemma3nForCausalLM"])
PP_2 = {"serving.prefill.tensor_parallel_size": "4", "serving.decode.tensor_parallel_size": "4",
        "serving.prefill.pipeline_parallel_size": "2",
        "serving.decode.pipeline_parallel_size": "2"}  # fmt: skip

# (name, configuration, the model's config.json, overrides, the layout as vLLM gets it,
#  the (code, setting) findings it must give; none: accepted). The default configuration runs
#  TP 8 on a p5.48xlarge (8 GPUs) per side.
Layout = tuple[str, str, dict[str, Any], dict[str, str], dict[str, Any], set[tuple[str, str]]]
LAYOUTS: list[Layout] = [
    ("28 heads at TP 8", "default", HEADS_28, {},
     {"tensor_parallel_size": 8},
     {("model-tensor-parallel-heads", f"{side}.tensor_parallel_size") for side in BOTH}),
    ("28 heads at TP 4", "default",  HEADS_28,
     {"serving.prefill.tensor_parallel_size": "4", "serving.decode.tensor_parallel_size": "4"},
     {"tensor_parallel_size": 4}, set()),
    ("40 heads at TP 8", "default", HEADS_40, {}, {"tensor_parallel_size": 8}, set()),
    ("64 heads at TP 8", "default", QWEN3_32B, {}, {"tensor_parallel_size": 8}, set()),
    ("10 KV heads at TP 8", "default", HEADS_40_KV_10, {},
     {"tensor_parallel_size": 8},
     {("model-tensor-parallel-kv-heads", f"{side}.tensor_parallel_size") for side in BOTH}),
    ("10 KV heads at TP 2", "default", HEADS_40_KV_10,
     {"serving.prefill.tensor_parallel_size": "2", "serving.decode.tensor_parallel_size": "2"},
     {"tensor_parallel_size": 2}, set()),
    ("4 KV heads at TP 8", "default", QWEN3_30B_A3B,
     {"serving.model.id": "Qwen/Qwen3-30B-A3B"}, {"tensor_parallel_size": 8}, set()),
    ("expert parallel, dense", "default", QWEN3_32B,
     {"serving.decode.expert_parallel": "true"},
     {"tensor_parallel_size": 8, "enable_expert_parallel": True},
     {("model-dense-expert-parallel", "serving.decode.expert_parallel")}),
    ("expert parallel, 128 experts", "default", QWEN3_30B_A3B,
     {"serving.model.id": "Qwen/Qwen3-30B-A3B", "serving.decode.expert_parallel": "true"},
     {"tensor_parallel_size": 8, "enable_expert_parallel": True}, set()),
    ("data parallel, dense", "deepseek-v3-pd", HEADS_40, {},
     {"tensor_parallel_size": 1, "data_parallel_size": 16, "enable_expert_parallel": True},
     {("model-dense-data-parallel", f"{side}.data_parallel_size") for side in BOTH}
     | {("model-dense-expert-parallel", f"{side}.expert_parallel") for side in BOTH}),
    ("pipeline parallel, a class with it", "default", model("Qwen3-8B.json"), PP_2,
     {"tensor_parallel_size": 4, "pipeline_parallel_size": 2}, set()),
    ("pipeline parallel, a class without it", "default", WITHOUT_PP, PP_2,
     {"tensor_parallel_size": 4, "pipeline_parallel_size": 2},
     {("model-pipeline-parallel-unsupported", f"{side}.pipeline_parallel_size")
      for side in BOTH}),
    ("a class without pipeline parallel, at PP 1", "default", WITHOUT_PP, {},
     {"tensor_parallel_size": 8}, set()),
    ("DeepSeek-V3 as the example runs it", "deepseek-v3-pd", DEEPSEEK_V3, {},
     {"tensor_parallel_size": 1, "data_parallel_size": 16, "enable_expert_parallel": True},
     set()),
    ("EPLB, 256 + 7 experts over 16 ranks", "deepseek-v3-pd", DEEPSEEK_V3,
     {"serving.decode.eplb.num_redundant_experts": "7"},
     {"tensor_parallel_size": 1, "data_parallel_size": 16, "enable_expert_parallel": True},
     {("model-eplb-experts", "serving.decode.eplb.num_redundant_experts")}),
]  # fmt: skip


def model_file(folder: Path, config: dict[str, Any]) -> str:
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def layout_findings(
    folder: Path, configuration: str, config: dict[str, Any], overrides: dict[str, str]
) -> set[tuple[str, str]]:
    """(code, setting) of this module's findings for the configuration with that config.json."""
    settings = {"serving.model.config_file": model_file(folder, config), **overrides}
    try:
        found = evaluate(settings_for(configuration, **settings))
    except ConfigError as error:
        found = error.problems
    return {(finding.code, finding.path) for finding in found if finding.code in CODES}


@pytest.mark.parametrize(
    ("configuration", "config", "overrides", "expected"),
    [row[1:4] + row[5:] for row in LAYOUTS],
    ids=[row[0] for row in LAYOUTS],
)
def test_each_layout_is_judged_by_the_models_config(
    tmp_path: Path,
    configuration: str,
    config: dict[str, Any],
    overrides: dict[str, str],
    expected: set[tuple[str, str]],
) -> None:
    assert layout_findings(tmp_path, configuration, config, overrides) == expected


def test_the_message_names_the_heads_and_the_tps_that_would_do(tmp_path: Path) -> None:
    path = model_file(tmp_path, HEADS_28)
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **{"serving.model.config_file": path})
    (said, *_) = [str(p) for p in raised.value.problems if p.code == "model-tensor-parallel-heads"]
    assert said.startswith("serving.prefill.tensor_parallel_size = 8: TP 8 does not divide")
    assert "the model's 28 attention heads" in said
    assert f"({path})" in said
    assert "use one of [1, 2, 4]" in said  # divide 28 and the node's 8 GPUs


def test_the_tps_offered_also_suit_the_kv_heads(tmp_path: Path) -> None:
    path = model_file(tmp_path, HEADS_40_KV_10)
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **{"serving.model.config_file": path})
    (said, *_) = [
        str(p) for p in raised.value.problems if p.code == "model-tensor-parallel-kv-heads"
    ]
    assert "the model's 10 KV heads" in said
    assert "'10 is not divisible by 8'" in said
    assert "use one of [1, 2]" in said  # 4 divides 40 but not 10


# vLLM's expert count (model_arch_config_convertor.py get_num_experts): the first key present,
# a per-layer list, NemotronH's MoE blocks.
EXPERT_COUNTS = [
    ({}, 0),
    ({"num_experts": 128}, 128),
    ({"num_local_experts": 8}, 8),
    ({"moe_num_experts": 16}, 16),
    ({"num_experts": 0, "n_routed_experts": 64}, 0),  # the first present decides
    ({"num_experts": [64, 64]}, 64),
    ({"block_configs": [{"block_type": "moe", "n_routed_experts": 32}, {"block_type": "x"}]}, 32),
    ({"text_config": {"num_local_experts": 4}}, 4),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "experts"), EXPERT_COUNTS)
def test_experts_are_counted_as_vllm_counts_them(fields: dict[str, Any], experts: int) -> None:
    assert rule.vllm_num_experts(fields) == experts


def test_without_a_config_these_rules_are_not_applied_and_synth_says_so() -> None:
    """An unknown model: nothing to judge the layout by, and model-unchecked says it."""
    findings = evaluate(settings_for("default", **{"serving.model.id": "acme/unknown-model"}))
    assert not [f for f in findings if f.code in CODES]
    (unchecked,) = [f for f in findings if f.code == "model-unchecked"]
    assert "the parallel layout against its attention heads and experts" in unchecked.message


# The config's architectures and the engine's model_impl -> the class vLLM 0.26 resolves them to
# (registry.py inspect_model_cls) and whether it runs pipeline parallel ("": not judged).
RESOLUTIONS = [
    (["Qwen3ForCausalLM"], "auto", ("Qwen3ForCausalLM", True)),
    (["Gemma3nForCausalLM"], "auto", ("Gemma3nForCausalLM", False)),
    (["Gemma3nForCausalLM"], "vllm", ("Gemma3nForCausalLM", False)),
    # the first registered one decides, whatever follows it
    (["NotAModel", "Gemma3nForCausalLM", "Qwen3ForCausalLM"], "auto",
     ("Gemma3nForCausalLM", False)),
    # none registered: "auto" falls back to the Transformers backend, which has it
    (["NotAModel"], "auto", ("TransformersForCausalLM", True)),
    ([], "auto", ("TransformersForCausalLM", True)),
    # the Transformers backend asked for
    (["Gemma3nForCausalLM"], "transformers", ("TransformersForCausalLM", True)),
    # "vllm" with none registered: vLLM refuses the model itself, not its pipeline parallel
    (["NotAModel"], "vllm", ("", True)),
    (["Gemma3nForCausalLM"], "terratorch", ("", True)),
    # a registered class the catalog could not import: not judged
    (["Terratorch"], "auto", ("", True)),
]  # fmt: skip


@pytest.mark.parametrize(("architectures", "model_impl", "resolved"), RESOLUTIONS)
def test_the_class_is_resolved_as_vllms_registry_resolves_it(
    architectures: list[str], model_impl: str, resolved: tuple[str, bool]
) -> None:
    assert pipeline_parallel_class(architectures, model_impl) == resolved


def test_the_transformers_backend_named_for_the_fallback_is_in_the_catalog() -> None:
    catalog = json.loads(PIPELINE_PARALLEL_FILE.read_text())
    assert TRANSFORMERS_BACKEND in catalog["supports_pipeline_parallel"]
    assert "Terratorch" in catalog["not_inspected"]


def test_pipeline_parallel_under_the_transformers_backend_is_accepted(tmp_path: Path) -> None:
    overrides = {**PP_2, "serving.engine_options": '{"model_impl": "transformers"}'}
    assert layout_findings(tmp_path, "default", WITHOUT_PP, overrides) == set()


def test_the_configuration_reference_quotes_the_catalogs_counts() -> None:
    catalog = json.loads(PIPELINE_PARALLEL_FILE.read_text())
    page = " ".join((Path(__file__).parents[2] / "docs" / "configuration.md").read_text().split())
    assert (
        f"({len(catalog['supports_pipeline_parallel'])} classes with it, "
        f"{len(catalog['without_pipeline_parallel'])} without; "
        f"{len(catalog['not_inspected'])} whose modules need packages"
    ) in page
