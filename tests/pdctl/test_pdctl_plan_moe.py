"""pdctl plan for frontier MoE models: MLA's KV cache and expert weights under data and expert
parallel, checked against arithmetic written out from the configs' numbers and vLLM 0.26's rules.

Rules (vllm-project/vllm v0.26.0, read from the e2e venv's installed source):
- MLA caches kv_lora_rank + qk_rope_head_dim values per token per layer, one "KV head", the same
  spec on every TP rank: model_executor/layers/attention/mla_attention.py (MLAAttention
  head_size, num_kv_heads = 1, get_kv_cache_spec) and v1/kv_cache_interface.py
  (MLAAttentionSpec.real_page_size_bytes; 656 bytes per token for fp8_ds_mla).
- Routed experts spread over TP x DP ranks (sliced without EP, whole with EP), global experts =
  routed + redundant, dealt evenly: model_executor/layers/fused_moe/config.py
  (FusedMoEParallelConfig.make), expert_map_manager.py (determine_expert_map), layer.py.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from catalog.expert_placement import Parallelism, WeightParts
from catalog.instances import CATALOG
from catalog.model_architecture import UnsupportedModelError, model_shape
from pdctl.cli import app
from pdctl.kv_plan import plan
from tests.configurations import PROJECT_ROOT
from tests.pdctl.test_pdctl_plan import LLAMA_3_1_70B, QWEN3_30B_A3B

MODEL_CONFIGS = PROJECT_ROOT / "catalog" / "model_configs"
DEEPSEEK_V3 = json.loads((MODEL_CONFIGS / "DeepSeek-V3.json").read_text())
QWEN3_8B = json.loads((MODEL_CONFIGS / "Qwen3-8B.json").read_text())
# DeepSeek-V3.2's sparse attention adds an indexer to V3's architecture; its config keys (the
# V3.2-Exp config.json, written from knowledge) on V3's numbers.
DEEPSEEK_V32 = {**DEEPSEEK_V3, "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}
# Qwen3-235B-A22B's config.json as its Hugging Face repository publishes it, written from
# knowledge (reduced to what the estimate reads); its model card gives 235 B total, 22 B active,
# which test_published_parameter_counts checks these numbers against.
QWEN3_235B_A22B = {
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_hidden_layers": 94,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
P5EN = CATALOG["p5en.48xlarge"]


def _mla_kv_bytes_per_token(config: dict, element_bytes: int) -> int:
    """One latent per layer (mla_attention.py): (kv_lora_rank + qk_rope_head_dim) x layers x
    bytes per element; not x heads, not x 2 for K and V."""
    latent = config["kv_lora_rank"] + config["qk_rope_head_dim"]
    return latent * config["num_hidden_layers"] * element_bytes


def test_mla_kv_bytes_are_one_latent_per_layer_worked_by_hand() -> None:
    # DeepSeek-V3, bf16 cache ("auto" = torch_dtype bfloat16, 2 bytes):
    #   (kv_lora_rank 512 + qk_rope_head_dim 64) x 61 layers x 2 bytes = 576 x 122 = 70,272.
    # Its 128 heads' keys (192) and values (128) cached per head would be
    #   61 x 128 x (192 + 128) x 2 = 4,997,120 bytes (71x).
    assert _mla_kv_bytes_per_token(DEEPSEEK_V3, 2) == (512 + 64) * 61 * 2 == 70_272
    shape = model_shape(DEEPSEEK_V3)
    assert shape.kv_bytes_per_token == _mla_kv_bytes_per_token(DEEPSEEK_V3, 2)
    assert model_shape(DEEPSEEK_V3, "fp8").kv_bytes_per_token == _mla_kv_bytes_per_token(
        DEEPSEEK_V3, 1
    )


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_mla_latent_is_whole_on_every_tensor_parallel_rank(tp: int) -> None:
    mla, gqa = model_shape(DEEPSEEK_V3), model_shape(LLAMA_3_1_70B)  # 8 KV heads
    assert mla.kv_bytes_per_token_per_gpu(tp) == mla.kv_bytes_per_token
    assert gqa.kv_bytes_per_token_per_gpu(tp) == gqa.kv_bytes_per_token // tp
    # Pipeline stages split the layers: 61 over 2 stages, the larger holds 31.
    assert mla.kv_bytes_per_token_per_gpu(tp, 2) == 31 * (512 + 64) * 2


def test_sparse_mla_adds_the_indexer_cache_and_sizes_fp8_ds_mla_as_its_packed_layout() -> None:
    # Per layer: fp8_ds_mla's 656 bytes (512 FP8 + 4 float32 scales + 64 bf16 = 512 + 16 + 128)
    # plus the indexer's 128 FP8 keys and one float32 scale per 128 (deepseek_v2.py Indexer).
    layers, indexer = DEEPSEEK_V32["num_hidden_layers"], 128 + 128 // 128 * 4
    assert 512 + 4 * 4 + 64 * 2 == 656
    packed = model_shape(DEEPSEEK_V32, "fp8_ds_mla")
    assert packed.kv_bytes_per_token == layers * (656 + indexer)
    assert model_shape(DEEPSEEK_V32).kv_bytes_per_token == layers * ((512 + 64) * 2 + indexer)
    # V3.2's "bfloat16" is vLLM's "auto" (model_executor/models/config.py).
    assert model_shape(DEEPSEEK_V32, "bfloat16").kv_bytes_per_token == (
        model_shape(DEEPSEEK_V32).kv_bytes_per_token
    )


@pytest.mark.parametrize(
    ("config", "cache_dtype", "fragment"),
    [
        (DEEPSEEK_V32, "fp8", "picks the backend on the GPU"),
        (DEEPSEEK_V3, "fp8_ds_mla", "has no index_topk"),
        (LLAMA_3_1_70B, "fp8_ds_mla", "no multi-head latent attention"),
        ({**DEEPSEEK_V32, "kv_lora_rank": 256}, "fp8_ds_mla", "this model has 256 + 64"),
        (DEEPSEEK_V3, "int3", "is not sized here; known: auto"),
        (DEEPSEEK_V3, "turboquant_4bit_nc", "is not sized here"),
    ],
)
def test_cache_layouts_that_cannot_be_sized_are_refused_with_the_reason(
    config, cache_dtype, fragment
) -> None:
    with pytest.raises(UnsupportedModelError, match=re.escape(fragment)):
        model_shape(config, cache_dtype)


@pytest.mark.parametrize(
    ("config", "total", "active"),
    [
        # DeepSeek-V3 model card: 671 B total (without the 14 B MTP module), 37 B activated.
        (DEEPSEEK_V3, 671e9, 37e9),
        (QWEN3_235B_A22B, 235e9, 22e9),
        (QWEN3_30B_A3B, 30.5e9, 3.3e9),
    ],
    ids=["deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b"],
)
def test_published_parameter_counts(config, total, active) -> None:
    shape = model_shape(config)
    assert shape.parameters == pytest.approx(total, rel=0.02)
    assert shape.active_parameters == pytest.approx(active, rel=0.05)


def test_deepseek_dense_layers_and_shared_expert_come_from_the_config() -> None:
    shape = model_shape(DEEPSEEK_V3)
    layers, first_dense = DEEPSEEK_V3["num_hidden_layers"], DEEPSEEK_V3["first_k_dense_replace"]
    assert shape.moe_layers == layers - first_dense == 58
    assert shape.shared_expert_intermediate_size == (
        DEEPSEEK_V3["n_shared_experts"] * DEEPSEEK_V3["moe_intermediate_size"]
    )
    every_other = model_shape({**DEEPSEEK_V3, "moe_layer_freq": 2})
    assert every_other.moe_layers == len([i for i in range(3, 61) if i % 2 == 0])
    qwen = model_shape({**QWEN3_235B_A22B, "mlp_only_layers": [0, 1], "decoder_sparse_step": 2})
    assert qwen.moe_layers == len([i for i in range(2, 94) if (i + 1) % 2 == 0])


def _expert_bytes(config: dict, weight_bytes: float) -> float:
    """All routed experts of one DeepSeek-V3-style model: MoE layers x experts x 3 matrices
    (gate, up, down) x hidden x moe_intermediate x bytes."""
    moe_layers = config["num_hidden_layers"] - config["first_k_dense_replace"]
    return (
        moe_layers
        * config["n_routed_experts"]
        * 3
        * config["hidden_size"]
        * config["moe_intermediate_size"]
        * weight_bytes
    )


def _plan_v3(**parallel):
    return plan(
        model_shape(DEEPSEEK_V3),
        P5EN,
        input_tokens=4096,
        output_tokens=512,
        max_model_len=32768,
        **parallel,
    )


def test_expert_parallel_gives_each_gpu_whole_experts_over_tp_x_dp_ranks() -> None:
    # DeepSeek-V3 on p5en, DP 16 x TP 1 with EP: EP size = TP x DP = 16; 256 routed experts /
    # 16 = 16 experts per GPU of each of the 58 MoE layers, FP8 (1 byte per weight):
    #   58 x 16 x 3 x 7168 x 2048 x 1 = 40,869,298,176 bytes (38.1 GiB).
    ep = _plan_v3(tensor_parallel=1, data_parallel=16, expert_parallel=True)
    assert ep.experts_per_gpu == DEEPSEEK_V3["n_routed_experts"] / 16 == 16
    all_experts = _expert_bytes(DEEPSEEK_V3, 1)
    assert ep.expert_weights_bytes_per_gpu == all_experts * 16 / 256 == 40_869_298_176
    # The rest (attention, dense layers, shared expert, embeddings) is whole on each TP-1 rank:
    # what one GPU holds without any parallelism, less the experts it no longer holds.
    alone = _plan_v3(tensor_parallel=1)
    assert ep.weights_bytes_per_gpu - ep.expert_weights_bytes_per_gpu == pytest.approx(
        alone.weights_bytes_per_gpu - all_experts, abs=2
    )
    assert ep.gpus_per_replica == 16


def test_without_expert_parallel_dp_still_slices_the_experts_over_tp_x_dp() -> None:
    sliced = _plan_v3(tensor_parallel=2, data_parallel=4)
    assert not sliced.expert_parallel
    assert sliced.experts_per_gpu == 256 / 8
    assert sliced.expert_weights_bytes_per_gpu == math.ceil(_expert_bytes(DEEPSEEK_V3, 1) / 8)


def test_redundant_experts_add_whole_experts_per_rank() -> None:
    # EPLB with 32 redundant experts over 16 ranks: (256 + 32) / 16 = 18 per GPU.
    eplb = _plan_v3(
        tensor_parallel=1, data_parallel=16, expert_parallel=True, eplb=True, redundant_experts=32
    )
    assert eplb.experts_per_gpu == (256 + 32) / 16 == 18
    assert eplb.expert_weights_bytes_per_gpu == _expert_bytes(DEEPSEEK_V3, 1) * 18 / 256


def test_uneven_experts_without_eplb_size_the_fullest_rank() -> None:
    # determine_expert_map: 256 over 24 ranks = 10 each, the first 16 ranks one more.
    assert Parallelism(data_parallel=24, expert_parallel=True).experts_per_gpu(256) == 11


def test_shared_experts_are_whole_on_every_rank_under_sequence_parallel_moe() -> None:
    parts = WeightParts(
        tp_split=0, replicated=0, shared_experts=800, routed_experts=0, routed_expert_count=0
    )
    assert parts.bytes_per_gpu(Parallelism(tensor_parallel=2, data_parallel=2)) == 400
    both = Parallelism(tensor_parallel=2, data_parallel=2, expert_parallel=True)
    assert parts.bytes_per_gpu(both) == 800  # use_sequence_parallel_moe: disable_tp


# The model's rules of the layout are synth's own (app_config/rules/model_parallel.py, each
# once in tests/config/test_model_parallel.py): plan applies the same functions to its options
# on the --model-config it is given, and exits 2 with the rule's message and code.
# (config.json, options, the code, fragments of the message)
REFUSED_FOR_THE_MODEL = [
    # Qwen2.5-7B's 28 attention heads (and 4 KV heads) on Qwen3-8B's config
    ({**QWEN3_8B, "num_attention_heads": 28, "num_key_value_heads": 4},
     ["--tensor-parallel=8"], "model-tensor-parallel-heads",
     ["serving.prefill.tensor_parallel_size = 8", "TP 8 does not divide the model's 28 "
      "attention heads", "use one of [1, 2, 4]"]),
    (QWEN3_8B, ["--tensor-parallel=4", "--data-parallel=2"], "model-dense-data-parallel",
     ["serving.prefill.data_parallel_size = 2", "Non-MoE models do not support external data "
      "parallel mode"]),
    (QWEN3_8B, ["--tensor-parallel=2", "--expert-parallel"], "model-dense-expert-parallel",
     ["serving.prefill.expert_parallel = True", "Number of experts in the model must be "
      "greater than 0"]),
    (DEEPSEEK_V3, ["--instance-type=p5en.48xlarge", "--tensor-parallel=1", "--data-parallel=16",
                   "--expert-parallel", "--eplb-redundant-experts=7"], "model-eplb-experts",
     ["256 routed experts", "+ 7 redundant = 263 do not divide over the 16 EP ranks",
      "use 16 redundant experts"]),
    # pipeline parallel from the configuration, on a class vLLM runs without it
    ({**QWEN3_8B, "architectures": ["Gemma3nForCausalLM"]},
     ["-c", "serving.prefill.tensor_parallel_size=4",
      "-c", "serving.prefill.pipeline_parallel_size=2"], "model-pipeline-parallel-unsupported",
     ["serving.prefill.pipeline_parallel_size = 2", "Gemma3nForCausalLM",
      "Pipeline parallelism is not supported for this model"]),
]  # fmt: skip


@pytest.mark.parametrize(("config", "options", "code", "fragments"), REFUSED_FOR_THE_MODEL)
def test_plan_refuses_a_layout_the_model_does_not_allow_by_synths_rules(
    tmp_path: Path, config: dict, options: list[str], code: str, fragments: list[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(
        app, ["plan", "--model-config", str(path), *options], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"[{code}]" in said, said
    for fragment in fragments:
        assert fragment in said, said
    assert "`cdk synth` refuses the same for this model" in said


@pytest.mark.parametrize(
    ("config", "options"),
    [
        ({**QWEN3_8B, "num_attention_heads": 28, "num_key_value_heads": 4},
         ["--tensor-parallel=4"]),
        (DEEPSEEK_V3, ["--instance-type=p5en.48xlarge", "--tensor-parallel=1",
                       "--data-parallel=16", "--expert-parallel", "--eplb-redundant-experts=16"]),
    ],
)  # fmt: skip
def test_plan_takes_the_layout_the_rules_offer_instead(
    tmp_path: Path, config: dict, options: list[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["plan", "--model-config", str(path), *options, "--json"])
    assert result.exit_code == 0, result.output


# The settings-only rules are the configuration's (app_config/serving.py Engine and
# ExpertLoadBalancing, app_config/model.py replica fit): plan's options go through them
# (pdctl/plan_layout.py) and exit 2 with the configuration's own message.
REFUSED_BY_THE_CONFIGURATION = [
    # options on the default configuration (a dense side without expert parallel)
    (["--tensor-parallel=1", "--data-parallel=16", "--eplb-redundant-experts=4"],
     "eplb.enabled without expert_parallel"),
    (["--tensor-parallel=1", "--expert-parallel", "--eplb-redundant-experts=8"],
     "EPLB moves experts between expert-parallel ranks, and TP 1 x DP 1 is one rank"),
    (["--instance-type=p5en.48xlarge", "--tensor-parallel=16"],
     "needs more GPUs than one p5en.48xlarge has"),
    (["--instance-type=p5en.48xlarge", "--tensor-parallel=3"],
     "TP 3 does not divide the 8 GPUs"),
    (["--tensor-parallel=1", "--data-parallel=12", "--expert-parallel"],
     "neither divides the 8 GPUs"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "fragment"), REFUSED_BY_THE_CONFIGURATION)
def test_plans_options_are_judged_by_the_configurations_rules(options, fragment) -> None:
    result = _cli("--instance-type=p5en.48xlarge", *options)
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert fragment in said, said
    assert "serving.prefill." in said  # the setting the option stands for


def test_kv_tokens_per_rank_and_replica_and_concurrency_at_max_model_len() -> None:
    result = _plan_v3(tensor_parallel=1, data_parallel=16, expert_parallel=True)
    per_gpu_token = _mla_kv_bytes_per_token(DEEPSEEK_V3, 2)
    usable = int(P5EN.gpu_memory_gib * 2**30 * 0.9)
    budget = usable - result.weights_bytes_per_gpu
    assert result.kv_budget_bytes_per_gpu == budget
    assert result.kv_tokens_per_dp_rank == budget // per_gpu_token
    assert result.kv_tokens_per_replica == 16 * (budget // per_gpu_token)
    assert result.sequences_at_max_model_len == 16 * (budget // per_gpu_token // 32768)
    assert result.max_concurrent_sequences == 16 * (budget // per_gpu_token // (4096 + 512))
    assert result.fits


def test_a_rank_whose_cache_cannot_hold_max_model_len_does_not_fit() -> None:
    """vLLM 0.26 refuses to start an engine whose KV cache cannot hold one max_model_len
    request (v1/core/kv_cache_utils.py check_enough_kv_cache_memory)."""
    result = _plan_v3(tensor_parallel=1, data_parallel=16, expert_parallel=True)
    longer = plan(
        model_shape(DEEPSEEK_V3),
        P5EN,
        tensor_parallel=1,
        data_parallel=16,
        expert_parallel=True,
        input_tokens=4096,
        output_tokens=512,
        max_model_len=result.kv_tokens_per_dp_rank + 1,
    )
    assert longer.max_concurrent_sequences > 0
    assert not longer.fits
    assert "fewer than max_model_len" in longer.verdict


def test_deepseek_v3_fits_on_one_p5en_only_when_the_experts_are_spread() -> None:
    """671 B FP8 weights (627 GiB) over one TP-1 GPU cannot fit; over 16 EP ranks they do."""
    assert not _plan_v3(tensor_parallel=1).fits
    assert _plan_v3(tensor_parallel=1, data_parallel=16, expert_parallel=True).fits


def _cli(*args: str):
    return CliRunner().invoke(
        app,
        ["plan", "--model-config", str(MODEL_CONFIGS / "DeepSeek-V3.json"), *args],
        env={"COLUMNS": "300"},
    )


def test_cli_plans_mla_with_data_and_expert_parallel_options() -> None:
    result = _cli(
        "--instance-type=p5en.48xlarge",
        "--tensor-parallel=1",
        "--data-parallel=16",
        "--expert-parallel",
        "--eplb-redundant-experts=32",
        "--side=decode",
        "--json",
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert (body["side"], body["attention"], body["data_parallel"]) == ("decode", "mla", 16)
    assert body["kv_bytes_per_token"] == _mla_kv_bytes_per_token(DEEPSEEK_V3, 2)
    assert body["experts_per_gpu"] == 18
    assert body["expert_parallel"] is True
    assert body["nodes_per_replica"] == math.ceil(16 / P5EN.gpus)


def test_cli_exits_1_when_the_model_does_not_fit_and_2_for_a_layout_vllm_refuses() -> None:
    alone = _cli("--instance-type=p5en.48xlarge", "--tensor-parallel=1", "--json")
    assert alone.exit_code == 1, alone.output
    assert json.loads(alone.stdout)["fits"] is False
    refused = _cli("--tensor-parallel=1", "--data-parallel=16", "--eplb-redundant-experts=4")
    assert refused.exit_code == 2, refused.output
    assert "eplb.enabled without expert_parallel" in " ".join(refused.stderr.split())


# The examples' models: DeepSeek-V3 as tests/data holds it; Qwen3-235B-A22B-Instruct-2507-FP8 as
# the shape above with the FP8 checkpoints' quantization_config (128 x 128 blocks).
EXAMPLE_MODELS = {
    "deepseek-v3-pd.yaml": DEEPSEEK_V3,
    "deepseek-v3-pd-one-node.yaml": DEEPSEEK_V3,
    "qwen3-235b-a22b-pd.yaml": {
        **QWEN3_235B_A22B,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        },
    },
}


@pytest.mark.parametrize("side", ["prefill", "decode"])
@pytest.mark.parametrize("example", sorted(EXAMPLE_MODELS))
def test_each_moe_example_side_is_planned_from_its_configuration_and_fits(
    example: str, side: str, tmp_path: Path
) -> None:
    """serving.<side>.data_parallel_size, expert_parallel and eplb are plan's defaults; the
    examples' layouts leave every DP rank room for max_model_len."""
    example_file = PROJECT_ROOT / "examples" / example
    serving = yaml.safe_load(example_file.read_text())["serving"]
    engine = serving[side]
    model = tmp_path / "config.json"
    model.write_text(json.dumps(EXAMPLE_MODELS[example]))
    arguments = ["--model-config", str(model), "--config", str(example_file), "--side", side]
    result = CliRunner().invoke(app, ["plan", *arguments, "--json"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    dp = engine.get("data_parallel_size", 1)
    ranks = dp * engine.get("tensor_parallel_size", 1)
    experts = model_shape(EXAMPLE_MODELS[example]).experts
    redundant = engine.get("eplb", {}).get("num_redundant_experts", 0)
    assert body["data_parallel"] == dp
    assert body["expert_parallel"] is engine["expert_parallel"]
    assert body["experts_per_gpu"] == math.ceil((experts + redundant) / ranks)
    assert body["max_model_len"] == serving["max_model_len"]
    assert body["sequences_at_max_model_len"] >= dp


def test_options_override_the_sides_configuration() -> None:
    example = PROJECT_ROOT / "examples" / "deepseek-v3-pd.yaml"
    result = _cli(
        *("--config", str(example), "--side=decode", "--data-parallel=8"),
        *("--eplb-redundant-experts=0", "--no-expert-parallel", "--json"),
    )
    assert result.exit_code == 2, result.output  # the example's decode side enables EPLB
    assert "eplb.enabled without expert_parallel" in " ".join(result.stderr.split())
    result = _cli(
        *("--config", str(example), "--side=decode", "--data-parallel=8"),
        *("--eplb-redundant-experts=0", "--json"),
    )
    assert result.exit_code in (0, 1), result.output
    body = json.loads(result.stdout)
    assert (body["data_parallel"], body["experts_per_gpu"]) == (8, 256 / 8)


BAD_MLA = [
    ("kv_lora_rank", 0, "kv_lora_rank = 0; expected a whole number"),
    ("kv_lora_rank", -512, "kv_lora_rank = -512; expected a whole number"),
    ("kv_lora_rank", "512", "kv_lora_rank = 512; expected a whole number"),
    ("kv_lora_rank", 512.0, "kv_lora_rank = 512.0; expected a whole number"),
    ("kv_lora_rank", 2**40, "expected a whole number from 1 to"),
    ("qk_rope_head_dim", None, "qk_rope_head_dim is missing"),
    ("qk_rope_head_dim", 0, "qk_rope_head_dim = 0"),
    ("qk_nope_head_dim", True, "qk_nope_head_dim = True"),
    ("v_head_dim", [128], "v_head_dim = [128]"),
    ("q_lora_rank", -1, "q_lora_rank = -1"),
    ("first_k_dense_replace", -1, "first_k_dense_replace = -1; expected a whole number from 0"),
    ("first_k_dense_replace", 62, "expected a whole number from 0 to 61"),
    ("moe_layer_freq", 0, "moe_layer_freq = 0"),
    ("n_routed_experts", -256, "n_routed_experts = -256"),
    ("n_shared_experts", 1.5, "n_shared_experts = 1.5"),
    ("compress_ratios", [1, 4], "DeepSeek-V4"),
    ("model_type", "kimi_linear", "linear-attention"),
    ("index_topk", 2048, "index_head_dim is missing"),
]


@pytest.mark.parametrize(
    ("key", "value", "fragment"), BAD_MLA, ids=[f"{k}={v!r}"[:40] for k, v, _ in BAD_MLA]
)
def test_mla_and_moe_keys_no_model_holds_are_refused_in_one_line(
    key, value, fragment, tmp_path: Path
) -> None:
    config = {**DEEPSEEK_V3, key: value}
    if value is None:
        config.pop(key)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(
        app, ["plan", "--model-config", str(path), "--tensor-parallel=1"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert fragment in " ".join(result.stderr.split()), result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2


@pytest.mark.parametrize(
    "options",
    [
        ["--data-parallel=0"],
        ["--data-parallel=two"],
        ["--eplb-redundant-experts=-1"],
        ["--kv-cache-dtype=int3"],
        ["--side=both"],
    ],
)
def test_bad_plan_options_exit_2_without_a_traceback(options: list[str]) -> None:
    result = _cli(*options)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_absurd_layer_counts_are_sized_at_once_and_do_not_fit(tmp_path: Path) -> None:
    """MoE layers are counted arithmetically, not by walking 2**31 layers."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**DEEPSEEK_V3, "num_hidden_layers": 2**31 - 1}))
    started = time.monotonic()
    result = CliRunner().invoke(
        app, ["plan", "--model-config", str(path), "--json"], env={"COLUMNS": "300"}
    )
    assert time.monotonic() - started < 10
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["fits"] is False


# Issue 30 item 4: the transfer and the weights as vLLM 0.26 and NIXL 1.3.1 place them.
P5 = CATALOG["p5.48xlarge"]


def _gbps_per_gpu(instance) -> float:
    """NIXL 1.3.1 groupNicsWithAccel: a GPU's own EFA devices (devices // GPUs), each carrying
    the node's bandwidth / devices; fewer devices than GPUs are shared (devices / GPUs)."""
    devices, gpus = instance.network_cards, instance.gpus
    share = devices // gpus if devices >= gpus else devices / gpus
    return instance.efa_bandwidth_gbps / devices * share


@pytest.mark.parametrize(
    ("tp", "config"), [(1, DEEPSEEK_V3), (8, DEEPSEEK_V3), (1, LLAMA_3_1_70B), (8, LLAMA_3_1_70B)]
)
def test_a_ranks_kv_moves_over_its_gpus_own_efa_devices_not_the_whole_node(tp, config) -> None:
    """At TP 1 one GPU holds the request's whole KV and NIXL moves it over that GPU's devices
    (400 Gbps on p5/p5en), eight times slower than the node's 3,200 Gbps would say; under GQA at
    TP 8 each GPU moves an eighth, in parallel. MLA's latent is whole on every GPU."""
    shape = model_shape(config)
    result = plan(shape, P5, tensor_parallel=tp, input_tokens=4096, output_tokens=512)
    per_gpu = shape.kv_bytes_per_token_per_gpu(tp) * 4096
    assert result.kv_bytes_per_request_per_gpu == per_gpu
    assert result.efa_gbps_per_gpu == _gbps_per_gpu(P5) == 400
    assert result.transfer_seconds_efa == pytest.approx(per_gpu / (400e9 / 8 * 0.7))
    whole_node = shape.kv_bytes_per_token * 4096 / (P5.efa_bandwidth_gbps * 1e9 / 8 * 0.7)
    if tp == 1:
        assert result.transfer_seconds_efa == pytest.approx(8 * whole_node)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_the_catalog_gives_each_gpu_its_nixl_share_of_the_nodes_efa(name: str) -> None:
    from catalog.efa_layout import efa_devices, efa_gbps_per_gpu

    instance = CATALOG[name]
    assert efa_devices(instance) == instance.network_cards
    assert efa_gbps_per_gpu(instance) == pytest.approx(_gbps_per_gpu(instance))
    assert efa_gbps_per_gpu(instance) * instance.gpus <= instance.efa_bandwidth_gbps


def test_mla_weights_per_gpu_add_the_absorbed_bf16_copies_and_the_routers() -> None:
    """vLLM 0.26 MLAAttention.process_weights_after_loading keeps W_UV and W_UK_T, bf16 copies
    of kv_b_proj (kv_lora_rank x heads x (qk_nope + v) per layer, split by TP); every MoE layer's
    GateLinear router (hidden x experts, bf16, unquantized) is whole on every rank.
    DeepSeek-V3: 61 x 512 x 128 x 256 x 2 = 2,046,820,352 bytes and 58 x 7168 x 256 x 2 =
    212,860,928 bytes: 2.1 GiB per TP-1 GPU that the plan missed."""
    c = DEEPSEEK_V3
    copies = (
        c["num_hidden_layers"]
        * c["kv_lora_rank"]
        * c["num_attention_heads"]
        * (c["qk_nope_head_dim"] + c["v_head_dim"])
        * 2
    )
    routers = (c["num_hidden_layers"] - c["first_k_dense_replace"]) * c["hidden_size"] * 256 * 2
    assert (copies, routers) == (2_046_820_352, 212_860_928)
    shape = model_shape(DEEPSEEK_V3)
    parts = shape.weight_parts()
    without = WeightParts(
        tp_split=parts.tp_split - copies,
        replicated=parts.replicated - routers,
        shared_experts=parts.shared_experts,
        routed_experts=parts.routed_experts,
        routed_expert_count=parts.routed_expert_count,
    )
    for tp in (1, 8):
        layout = Parallelism(tensor_parallel=tp, data_parallel=16 // tp, expert_parallel=True)
        added = parts.bytes_per_gpu(layout) - without.bytes_per_gpu(layout)
        assert added == pytest.approx(copies / tp + routers, abs=2)


# Issue 30 items 5 and 6: what a group sends between its GPUs, per token and per rebalance.
def _agrs_bytes_per_token_per_layer(config: dict) -> int:
    """allgather_reducescatter (vLLM 0.26 all2all.py AgRsAll2AllManager): the dispatch gathers
    every token's hidden state (bf16) with its top-k float32 weights and int32 ids to every rank,
    the combine reduce-scatters a bf16 hidden state back."""
    hidden = config["hidden_size"] * 2
    return hidden + config["num_experts_per_tok"] * (4 + 4) + hidden


@pytest.mark.parametrize(("dp", "nodes"), [(8, 1), (16, 2)])
def test_the_all_to_all_sends_every_token_to_every_rank_and_crosses_efa_between_nodes(
    dp: int, nodes: int
) -> None:
    result = _plan_v3(tensor_parallel=1, data_parallel=dp, expert_parallel=True)
    moe_layers = DEEPSEEK_V3["num_hidden_layers"] - DEEPSEEK_V3["first_k_dense_replace"]
    per_layer = _agrs_bytes_per_token_per_layer(DEEPSEEK_V3)
    assert result.moe.bytes_per_token == per_layer * (dp - 1) * moe_layers
    assert result.moe.efa_bytes_per_token == per_layer * (nodes - 1) * moe_layers
    assert result.moe.nvlink_bytes_per_token == per_layer * (dp - nodes) * moe_layers


def test_no_all_to_all_without_expert_parallel_over_several_ranks() -> None:
    assert _plan_v3(tensor_parallel=8).moe is None
    assert _plan_v3(tensor_parallel=1, data_parallel=8).moe is None


@pytest.mark.parametrize(("dp", "redundant"), [(8, 8), (16, 16)])
def test_a_synchronous_eplb_rebalance_stalls_every_rank_for_the_experts_it_receives(
    dp: int, redundant: int
) -> None:
    """use_async false: rearrange_expert_weights_inplace moves every MoE layer inside one step.
    At most a rank replaces all its experts; those from ranks on another node come over its
    400 Gbps EFA share, the rest over NVLink (450 GB/s a direction on H200), both at 0.7."""
    result = _plan_v3(
        tensor_parallel=1, data_parallel=dp, expert_parallel=True, eplb=True,
        redundant_experts=redundant,
    )  # fmt: skip
    received = result.expert_weights_bytes_per_gpu
    remote = received * (dp - P5EN.gpus) / (dp - 1)
    assert result.moe.eplb_bytes_per_rank == received
    assert result.moe.eplb_efa_bytes_per_rank == pytest.approx(remote, abs=1)
    stall = max(remote / (400e9 / 8 * 0.7), (received - remote) / (450e9 * 0.7))
    assert result.moe.eplb_stall_seconds == pytest.approx(stall, rel=1e-6)
    no_eplb = _plan_v3(tensor_parallel=1, data_parallel=dp, expert_parallel=True)
    assert no_eplb.moe.eplb_stall_seconds == 0


def test_plan_compares_the_one_node_group_with_the_two_node_one() -> None:
    """The one-node shape fits DeepSeek-V3 FP8 by the app's sizing and sends nothing over EFA;
    the two-node one holds more KV per rank (half the experts per GPU) and pays EFA traffic."""
    one, two = (PROJECT_ROOT / "examples" / name for name in (
        "deepseek-v3-pd-one-node.yaml", "deepseek-v3-pd.yaml"))  # fmt: skip
    result = _cli("--config", str(one), "--versus", str(two), "--side=decode", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    versus = body["versus"]
    assert versus["config"] == str(two)
    assert (body["nodes_per_replica"], versus["nodes_per_replica"]) == (1, 2)
    assert body["fits"]
    assert versus["fits"]
    assert body["moe"]["efa_bytes_per_token"] == 0 < versus["moe"]["efa_bytes_per_token"]
    assert body["kv_tokens_per_dp_rank"] < versus["kv_tokens_per_dp_rank"]
    table = _cli("--config", str(one), "--versus", str(two), "--side=decode")
    assert table.exit_code == 0, table.output
    assert "all-to-all per token over EFA" in table.stdout


@pytest.mark.parametrize(("side", "filtered"), [("prefill", True), ("decode", False)])
def test_each_rank_reads_only_its_experts_at_load_where_the_filter_is_rendered(
    side: str, filtered: bool, tmp_path: Path
) -> None:
    """examples/deepseek-v3-pd.yaml: prefill (no EPLB) renders enable_ep_weight_filter, so a rank
    reads the 16 experts of each MoE layer it holds and every other tensor; decode runs EPLB,
    where vLLM 0.26 ignores the filter, so each rank reads the whole checkpoint at every group
    start. MLA's absorbed copies are built after loading, not read."""
    example = PROJECT_ROOT / "examples" / "deepseek-v3-pd.yaml"
    result = _cli("--config", str(example), f"--side={side}", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    shape = model_shape(DEEPSEEK_V3)
    on_disk = shape.weight_parts().total - shape.mla_absorbed_parameters() * 2
    others = _expert_bytes(DEEPSEEK_V3, 1) * (256 - 16) / 256
    expected = on_disk - others if filtered else on_disk
    assert body["checkpoint_bytes_read_per_rank"] == pytest.approx(expected, abs=2)
