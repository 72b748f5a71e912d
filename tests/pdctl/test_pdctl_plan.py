"""pdctl plan: KV sizing checked against values computed by hand from real model configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from catalog.instances import CATALOG
from pdctl.cli import app
from pdctl.kv_plan import UnsupportedModelError, model_shape, plan

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


def test_gqa_defaults_and_mla_refusal() -> None:
    no_gqa = {**LLAMA_3_1_8B}
    del no_gqa["num_key_value_heads"]
    assert model_shape(no_gqa).kv_heads == no_gqa["num_attention_heads"]
    with pytest.raises(UnsupportedModelError, match="kv_lora_rank"):
        model_shape({**LLAMA_3_1_8B, "kv_lora_rank": 512})


def test_request_transfer_and_capacity_on_p5() -> None:
    shape, p5 = model_shape(LLAMA_3_1_70B), CATALOG["p5.48xlarge"]
    result = plan(shape, p5, tensor_parallel=8, input_tokens=8192, output_tokens=512)
    assert result.kv_bytes_per_request == 327_680 * 8192
    assert result.transfer_seconds_tcp > 100 * result.transfer_seconds_efa  # 3.2 Tbps vs 10 Gbps
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
