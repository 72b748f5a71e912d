"""pdctl plan: KV sizing checked against values computed by hand from real model configs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from catalog.instances import CATALOG
from catalog.model_architecture import UnsupportedModelError, model_shape
from pdctl.cli import app
from pdctl.kv_plan import plan

# Public config.json values (Hugging Face model cards), reduced to what the estimate reads.
LLAMA_3_1_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
LLAMA_3_1_70B = {
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
QWEN3_32B = {
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "num_attention_heads": 64,
    "num_hidden_layers": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

# By hand: 2 (K, V) x layers x KV heads x head dim x 2 bytes (bf16).
#   Llama-3.1-8B:  2 x 32 x 8 x 128 x 2 = 131,072
#   Llama-3.1-70B: 2 x 80 x 8 x 128 x 2 = 327,680
#   Qwen3-32B:     2 x 64 x 8 x 128 x 2 = 262,144
# Published parameter counts: 8.03 B, 70.6 B, 32.8 B.
CASES = [
    (LLAMA_3_1_8B, 131_072, 8.03e9),
    (LLAMA_3_1_70B, 327_680, 70.6e9),
    (QWEN3_32B, 262_144, 32.8e9),
]


@pytest.mark.parametrize(("config", "kv_bytes", "parameters"), CASES)
def test_kv_bytes_and_parameters_match_hand_computation(config, kv_bytes, parameters) -> None:
    shape = model_shape(config)
    assert shape.kv_bytes_per_token == kv_bytes
    assert shape.parameters == pytest.approx(parameters, rel=0.02)


def test_kv_heads_default_to_the_attention_heads() -> None:
    no_gqa = {**LLAMA_3_1_8B}
    del no_gqa["num_key_value_heads"]
    assert model_shape(no_gqa).kv_heads == no_gqa["num_attention_heads"]


def test_a_null_kv_lora_rank_is_not_mla_as_in_vllm() -> None:
    """vLLM 0.26 takes a config as MLA only when kv_lora_rank is set and not null
    (transformers_utils/model_arch_config_convertor.py is_deepseek_mla); MLA itself is sized in
    test_pdctl_plan_moe.py."""
    shape = model_shape({**LLAMA_3_1_8B, "kv_lora_rank": None})
    assert shape.kv_bytes_per_token == model_shape(LLAMA_3_1_8B).kv_bytes_per_token


def test_request_transfer_and_capacity_on_p5() -> None:
    shape, p5 = model_shape(LLAMA_3_1_70B), CATALOG["p5.48xlarge"]
    result = plan(shape, p5, tensor_parallel=8, input_tokens=8192, output_tokens=512)
    assert result.kv_bytes_per_request == 327_680 * 8192
    # TP 8: each GPU moves its eighth of the KV over its own 400 Gbps share of the node's EFA.
    assert result.transfer_seconds_tcp > 100 * result.transfer_seconds_efa
    assert result.max_concurrent_sequences > 0
    assert result.pays_off


def test_short_prompts_do_not_pay_off_and_oversized_models_do_not_fit() -> None:
    short = plan(
        model_shape(LLAMA_3_1_8B),
        CATALOG["p5.48xlarge"],
        tensor_parallel=8,
        input_tokens=128,
        output_tokens=128,
    )
    assert not short.pays_off
    assert "unlikely" in short.verdict
    cramped = plan(
        model_shape(LLAMA_3_1_70B),
        CATALOG["p4d.24xlarge"],
        tensor_parallel=2,
        input_tokens=4096,
        output_tokens=512,
    )
    assert cramped.max_concurrent_sequences == 0
    assert "does not fit" in cramped.verdict


def test_cli_json_has_kv_bytes_per_token(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_3_1_8B))
    result = CliRunner().invoke(app, ["plan", "--model-config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["kv_bytes_per_token"] == 131_072


def test_cli_reports_a_missing_config_without_a_traceback() -> None:
    result = CliRunner().invoke(app, ["plan", "--model-config", "no/such/file.json"])
    assert result.exit_code == 2
    assert "no such file" in " ".join(result.output.split())


# Qwen3-30B-A3B: 128 experts, 8 routed per token; published 30.5 B total, 3.3 B active.
QWEN3_30B_A3B = {
    "hidden_size": 2048,
    "moe_intermediate_size": 768,
    "intermediate_size": 6144,
    "num_attention_heads": 32,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_moe_memory_counts_every_expert_and_compute_only_the_routed_ones() -> None:
    shape = model_shape(QWEN3_30B_A3B)
    assert shape.parameters == pytest.approx(30.5e9, rel=0.03)
    assert shape.active_parameters == pytest.approx(3.3e9, rel=0.1)


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    shape = model_shape(QWEN3_30B_A3B)  # 4 KV heads
    per_gpu_tp8 = shape.kv_bytes_per_token_per_gpu(8)
    assert per_gpu_tp8 == shape.kv_bytes_per_token_per_gpu(4)  # one head per rank either way
    assert per_gpu_tp8 * 4 == shape.kv_bytes_per_token
    assert shape.kv_bytes_per_token_per_gpu(2) == shape.kv_bytes_per_token // 2


# Quantized checkpoints, their config.json as published (reduced to what the estimate reads).
# gpt-oss-120b: MXFP4 experts; attention, router, embeddings and lm_head in BF16. OpenAI's
# model card gives its checkpoint as 60.8 GiB.
GPT_OSS_120B = {
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
}
# Qwen3-32B-FP8: every linear layer FP8 in 128 x 128 blocks; embeddings and lm_head BF16.
QWEN3_32B_FP8 = {
    **QWEN3_32B,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
}
# hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4.
LLAMA_3_1_8B_AWQ = {
    **LLAMA_3_1_8B,
    "torch_dtype": "float16",
    "quantization_config": {
        "bits": 4,
        "group_size": 128,
        "modules_to_not_convert": None,
        "quant_method": "awq",
        "version": "gemm",
        "zero_point": True,
    },
}


def _linear_and_embedding_parameters(config: dict) -> tuple[int, int]:
    """Linear-layer parameters (attention + MLP, every expert) and embedding + lm_head ones."""
    h, layers, heads = (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
    )
    head_dim = config.get("head_dim", h // heads)
    q, kv = heads * head_dim, config["num_key_value_heads"] * head_dim
    experts = config.get("num_local_experts", 1)
    linear = layers * (2 * h * q + 2 * h * kv + 3 * h * config["intermediate_size"] * experts)
    return linear, config["vocab_size"] * h * 2


def test_mxfp4_sizes_only_the_experts_at_4_25_bits_and_matches_the_published_checkpoint() -> None:
    shape = model_shape(GPT_OSS_120B)
    h, layers = 2880, 36
    experts = layers * 3 * h * 2880 * 128
    attention = layers * (2 * h * 64 * 64 + 2 * h * 8 * 64)
    embeddings = 201088 * h * 2
    routers = layers * h * 128  # one gate per MoE layer, unquantized (bf16)
    assert shape.weight_bytes == pytest.approx(
        experts * 4.25 / 8 + 2 * (attention + embeddings + routers)
    )
    assert shape.weight_bytes / 2**30 == pytest.approx(60.8, rel=0.03)


@pytest.mark.parametrize(
    ("config", "bits_per_linear_weight"),
    [(QWEN3_32B_FP8, 8), (LLAMA_3_1_8B_AWQ, 4 + (16 + 4) / 128)],
    ids=["fp8", "awq-int4"],
)
def test_quantized_linear_layers_are_sized_at_their_bits(config, bits_per_linear_weight) -> None:
    linear, embedding = _linear_and_embedding_parameters(config)
    shape = model_shape(config)
    expected = linear * bits_per_linear_weight / 8 + embedding * 2
    assert shape.weight_bytes == pytest.approx(expected, rel=1e-6)
    assert shape.weight_bytes < model_shape({**config, "quantization_config": None}).weight_bytes


def test_compressed_tensors_reads_its_groups_and_ignore_list() -> None:
    w4a16 = {
        **LLAMA_3_1_8B,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "int",
                        "strategy": "group",
                        "group_size": 128,
                    },
                }
            },
            "ignore": ["lm_head"],
        },
    }
    linear, embedding = _linear_and_embedding_parameters(w4a16)
    assert model_shape(w4a16).weight_bytes == pytest.approx(
        linear * (4 + 16 / 128) / 8 + embedding * 2, rel=1e-6
    )


@pytest.mark.parametrize(
    ("quantization", "fragment"),
    [
        ("fp8", "not a JSON object"),
        ({"quant_method": "int3-magic"}, "'int3-magic' is not sized here"),
        ({"quant_method": 8}, "not a name"),
        ({"quant_method": "awq", "bits": "4"}, "bits = '4': not a number"),
        ({"quant_method": "gptq"}, "no bits"),
        ({"quant_method": "compressed-tensors", "config_groups": []}, "config_groups"),
        ({"quant_method": "fp8", "ignored_layers": "lm_head"}, "not a list of names"),
        ({"quant_method": "bitsandbytes"}, "neither load_in_4bit"),
    ],
)
def test_quantization_configs_that_cannot_be_sized_are_refused(quantization, fragment) -> None:
    with pytest.raises(UnsupportedModelError, match=re.escape(fragment)):
        model_shape({**LLAMA_3_1_8B, "quantization_config": quantization})


def test_a_model_that_fits_only_quantized_passes_and_unquantized_fails(tmp_path: Path) -> None:
    """gpt-oss-120b on one p5 GPU (TP 1): 61 GiB of MXFP4 weights fit in 72 GiB usable; the same
    model in BF16 (about 218 GiB) does not, and plan exits 1."""
    for config, code in ((GPT_OSS_120B, 0), ({**GPT_OSS_120B, "quantization_config": None}, 1)):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        result = CliRunner().invoke(
            app,
            ["plan", "--model-config", str(path), "--tensor-parallel", "1", "--json"],
            env={"COLUMNS": "300"},
        )
        assert result.exit_code == code, result.output
        assert json.loads(result.stdout)["fits"] is (code == 0)


@pytest.mark.parametrize("instance_type", ["g6e.12xlarge", "p5.48xlarge"])
def test_on_shared_nodes_the_hand_off_crosses_the_nodes_gpu_link_not_efa(instance_type) -> None:
    """gpu_nodes.shared: each GPU's share of a request's KV over its own link to the others
    (NVLink, or PCIe on G6e) at IN_NODE_EFFICIENCY, and the verdict weighs that time."""
    from pdctl.kv_plan import IN_NODE_EFFICIENCY

    shape, instance = model_shape(QWEN3_32B), CATALOG[instance_type]
    kwargs = {"tensor_parallel": 2, "input_tokens": 4096, "output_tokens": 512}
    over_efa, in_node = (
        plan(shape, instance, **kwargs),
        plan(shape, instance, **kwargs, in_node=True),
    )
    assert (over_efa.hand_off_path, in_node.hand_off_path) == ("EFA", instance.gpu_link)
    per_gpu = in_node.kv_bytes_per_request_per_gpu
    link = instance.gpu_link_gbytes_per_s * 1e9 * IN_NODE_EFFICIENCY
    assert in_node.transfer_seconds_hand_off == pytest.approx(per_gpu / link)
    assert over_efa.transfer_seconds_hand_off == over_efa.transfer_seconds_efa
    # The node's GPU link is faster than a GPU's share of its EFA on every catalog type here.
    assert in_node.transfer_seconds_hand_off < over_efa.transfer_seconds_hand_off


def test_the_one_node_trial_pays_off_where_the_two_node_trial_does_not() -> None:
    """The same model on both: over trial-g6e's one 100 Gbps EFA interface per node the KV move
    eats much of the prefill it replaces; inside one G6 node, over PCIe, it does not (README,
    'Starting points')."""
    config = str(Path(__file__).resolve().parents[2] / "catalog/model_configs/Qwen3-8B.json")

    def planned(example: str) -> dict:
        result = CliRunner().invoke(
            app,
            ["plan", "--config", f"examples/{example}.yaml", "--side", "decode",
             "--model-config", config, "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    one_node, two_nodes = planned("trial-one-node"), planned("trial-g6e")
    assert (one_node["hand_off_path"], two_nodes["hand_off_path"]) == ("PCIe", "EFA")
    assert one_node["pays_off"]
    assert not two_nodes["pays_off"]
    # docs/architecture.md, 'Prefill and decode on one node', quotes both times.
    architecture = " ".join(
        (Path(__file__).resolve().parents[2] / "docs/architecture.md").read_text().split()
    )
    in_node_ms = one_node["transfer_seconds_hand_off"] * 1000
    efa_ms = two_nodes["transfer_seconds_hand_off"] * 1000
    assert f"that is {in_node_ms:.1f} ms on a G6 or G6e node, against {efa_ms:.0f} ms" in (
        architecture
    )
