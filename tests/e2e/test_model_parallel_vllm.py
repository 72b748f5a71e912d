"""vLLM 0.26's own checks on the layouts the model's rules judge (app_config/rules/
model_parallel.py): each row of tests/config/test_model_parallel.py's LAYOUTS, its config.json
and the side's layout, is built into vLLM's engine config (``EngineArgs.create_engine_config``:
ModelConfig from the config.json, ParallelConfig, then ``VllmConfig.__post_init__``, which calls
``ModelConfig.verify_with_parallel_config``, and the external data-parallel check Ray Serve LLM's
DP ranks meet), and, where that accepts it, the attention's ``QKVParallelLinear`` is built at the
layout's TP (the KV heads' split, checked when the model's weights are made). vLLM must refuse
exactly the rows the app refuses. No GPU, no Ray cluster, no weights. And the catalog the
pipeline-parallel rule reads is what this vLLM answers for every class its registry maps
(tools/vllm_pipeline_parallel.py, in the probe: vLLM's `supports_pp` on each imported class).

What a CPU cannot show: EPLB (vLLM's ParallelConfig refuses it off CUDA, and its experts'
division is checked in the MoE layer on the GPU), so the rows' EPLB finding is left out of the
comparison and the layout is given to vLLM without EPLB. The checkpoint's quantization_config is
dropped for vLLM (the CPU platform builds no fp8 method; the layout rules do not read it).
"""

from __future__ import annotations

import json
from typing import Any

from installed_probe import probe

from tests.config.test_model_parallel import LAYOUTS, layout_findings

# Runs in the child: argv[1] is {"folder": ..., "cases": {name: {"config", "parallel"}}};
# prints {name: "accepted" | "<the error vLLM raised>"}.
BUILD = """
import json, os, sys, types
from pathlib import Path
os.environ["HF_HUB_OFFLINE"] = "1"
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
platforms._current_platform = CpuPlatform()  # no GPU here: vLLM's CPU platform stands in
import vllm.distributed.parallel_state as parallel_state
from vllm.config import set_current_vllm_config
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.layers.linear import QKVParallelLinear

argument = json.loads(sys.argv[1])
results = {}
for index, (name, case) in enumerate(argument["cases"].items()):
    folder = Path(argument["folder"]) / str(index)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(case["config"]))
    parallel = case["parallel"]
    dp = parallel.get("data_parallel_size", 1)
    try:
        built = EngineArgs(
            model=str(folder),
            skip_tokenizer_init=True,
            data_parallel_rank=0 if dp > 1 else None,  # Ray Serve LLM's DPServer passes it
            **parallel,
        ).create_engine_config()
        model = built.model_config
        if not model.use_mla:
            # One rank's attention projection at the layout's TP: a stand-in TP group of that
            # size, rank 0, the model's head counts, tiny sizes.
            parallel_state._TP = types.SimpleNamespace(
                world_size=parallel["tensor_parallel_size"], rank_in_group=0
            )
            with set_current_vllm_config(built):
                QKVParallelLinear(
                    hidden_size=16,
                    head_size=2,
                    total_num_heads=model.model_arch_config.total_num_attention_heads,
                    total_num_kv_heads=model.get_total_num_kv_heads(),
                    bias=False,
                )
        results[name] = "accepted"
    except (AssertionError, ValueError, NotImplementedError) as error:
        results[name] = f"{type(error).__name__}: {error}"[:400]
print(json.dumps(results))
"""

# What vLLM says for each refusal the rules model; any other refusal is not the layout's.
VLLM_REFUSALS = {
    "model-tensor-parallel-heads": "must be divisible by tensor parallel size",
    "model-dense-expert-parallel": "Number of experts in the model must be greater than 0",
    "model-dense-data-parallel": "Non-MoE models do not support external data parallel mode",
    "model-tensor-parallel-kv-heads": "is not divisible by",
    "model-pipeline-parallel-unsupported": "Pipeline parallelism is not supported for this model",
}
NOT_ON_A_CPU = {"model-eplb-experts"}


def test_vllm_refuses_exactly_the_layouts_the_models_rules_refuse(tmp_path) -> None:
    cases: dict[str, dict[str, Any]] = {}
    expected: dict[str, set[str]] = {}
    for name, configuration, config, overrides, parallel, findings in LAYOUTS:
        vllm_config = {k: v for k, v in config.items() if k != "quantization_config"}
        cases[name] = {"config": vllm_config, "parallel": parallel}
        # The app's verdict, computed here again (the table asserts it equals `findings`).
        found = layout_findings(tmp_path, configuration, config, overrides)
        assert found == findings, name
        expected[name] = {code for code, _ in found} - NOT_ON_A_CPU
    said = probe(BUILD, {"folder": str(tmp_path / "vllm"), "cases": cases})
    disagreements = {}
    for name, codes in expected.items():
        verdict = said[name]
        if not codes:
            if verdict != "accepted":
                disagreements[name] = {"app": "accepted", "vllm": verdict}
        elif not any(VLLM_REFUSALS[code] in verdict for code in codes):
            disagreements[name] = {"app": sorted(codes), "vllm": verdict}
    assert not disagreements, json.dumps(disagreements, indent=1)
    refused = [name for name, codes in expected.items() if codes]
    assert len(refused) >= 4  # both kinds of rows were judged
    assert len(refused) < len(expected)


# Runs in the child: the catalog generated again from the installed vLLM, against the shipped one.
CATALOG = """
import json
from tools.vllm_pipeline_parallel import OUTPUT, inspect_registry, render
generated = render(inspect_registry())
print(json.dumps({"same": generated == OUTPUT.read_text(), "generated": json.loads(generated)}))
"""


def test_the_pipeline_parallel_catalog_is_what_the_installed_vllm_answers() -> None:
    said = probe(CATALOG, {})
    generated = said["generated"]
    assert said["same"], (
        "run tools/vllm_pipeline_parallel.py in the e2e venv and commit the catalog"
    )
    # the rule has both answers to give: the bundled models' classes run it, others do not
    assert {"Qwen3ForCausalLM", "DeepseekV3ForCausalLM"} <= set(
        generated["supports_pipeline_parallel"]
    )
    assert "Gemma3nForCausalLM" in generated["without_pipeline_parallel"]
