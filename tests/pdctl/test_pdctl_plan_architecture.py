"""pdctl plan refuses a model config that names an architecture but lacks the fields that make
it that architecture: an MoE architecture without its routed experts would be sized as a dense
model, an MLA architecture without kv_lora_rank as grouped-query attention, and either answered
"likely to pay off" for a model nobody runs (catalog/model_architecture.py, ARCHITECTURES: the
fields are those transformers' config classes define; vLLM would fill them with another
checkpoint's defaults). Each row: the config, the key removed, the fragment of the refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from catalog import model_architecture
from catalog.model_architecture import model_shape
from pdctl.cli import app
from tests.configurations import PROJECT_ROOT

MODEL_CONFIGS = PROJECT_ROOT / "catalog" / "model_configs"


def _config(name: str) -> dict:
    return json.loads((MODEL_CONFIGS / f"{name}.json").read_text())


def _without(config: dict, *keys: str) -> dict:
    return {key: value for key, value in config.items() if key not in keys}


MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "torch_dtype": "bfloat16",
}

REFUSED = [
    # (config, what it names, the fragment of the refusal)
    (_without(_config("DeepSeek-V3"), "n_routed_experts"), "n_routed_experts (its routed experts)"),
    (
        _without(_config("DeepSeek-V3"), "kv_lora_rank"),
        "kv_lora_rank (its multi-head latent attention)",
    ),
    ({**_config("DeepSeek-V3"), "n_routed_experts": 0}, "no n_routed_experts"),
    (_without(_config("Qwen3-30B-A3B"), "num_experts"), "no num_experts (its routed experts)"),
    (_without(MIXTRAL, "num_local_experts"), "no num_local_experts"),
    # named by its class alone (model_type left out): vLLM picks the model class by it
    (
        _without(_config("Qwen3-30B-A3B"), "num_experts", "model_type"),
        "names qwen3_moe",
    ),
    # named by model_type alone
    (_without(MIXTRAL, "num_local_experts", "architectures"), "names mixtral"),
]


@pytest.mark.parametrize(("config", "fragment"), REFUSED, ids=[f for _, f in REFUSED])
def test_a_config_that_does_not_describe_its_own_architecture_is_refused(
    config: dict, fragment: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(
        app, ["plan", "--model-config", str(path), "--json"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2, result.output
    assert result.stdout == ""  # no sizing, no verdict
    error = json.loads(result.stderr)
    assert fragment in error["error"]
    assert "use the model's own config.json" in error["error"]


@pytest.mark.parametrize(
    "name", ["DeepSeek-V3", "Qwen3-30B-A3B", "Qwen3-32B", "Llama-3.1-8B-Instruct"]
)
def test_whole_configs_of_each_family_are_sized(name: str) -> None:
    shape = model_shape(_config(name))
    named = _config(name).get("model_type")
    architecture = model_architecture.ARCHITECTURES.get(named)
    assert (shape.experts > 0) == bool(architecture and architecture.experts_key)
    assert (shape.mla is not None) == bool(architecture and architecture.mla)
    assert shape.kv_bytes_per_token > 0


def test_mixtral_whole_is_sized_as_a_mixture_of_experts() -> None:
    assert model_shape(MIXTRAL).experts == MIXTRAL["num_local_experts"]


def test_every_architecture_class_names_an_architecture_of_the_table() -> None:
    table = model_architecture.ARCHITECTURES
    assert set(model_architecture.ARCHITECTURE_CLASSES.values()) <= set(table)
