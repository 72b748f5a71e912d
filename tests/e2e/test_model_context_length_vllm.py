"""vLLM 0.26's own verdict on the context lengths the model rules judge
(app_config/rules/model_fit.py, ``model-context-length``): each context-length row of
tests/config/test_rules.py's HF_OVERRIDES (the bundled Qwen3-32B config.json, both sides'
``hf_overrides``, ``max_model_len``) is built into vLLM's engine config
(``EngineArgs.create_engine_config``: ModelConfig applies the overrides to the config.json as it
loads it, then ``_get_and_verify_max_len`` compares ``max_model_len`` with the length it derives).
vLLM must refuse exactly the rows the app refuses. No GPU, no Ray cluster, no weights; rows the
app refuses for another reason (a config no model has) are not vLLM's to judge here."""

from __future__ import annotations

import json
from typing import Any

from installed_probe import probe

from catalog.models import bundled_config
from tests.config.test_rules import HF_OVERRIDES

MODEL = "Qwen/Qwen3-32B"

# Runs in the child: argv[1] is {"folder", "config", "cases": {name: {"hf_overrides",
# "max_model_len"}}}; prints {name: "accepted" | "<the error vLLM raised>"}.
BUILD = """
import json, os, sys
from pathlib import Path
os.environ["HF_HUB_OFFLINE"] = "1"
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
platforms._current_platform = CpuPlatform()  # no GPU here: vLLM's CPU platform stands in
from vllm.engine.arg_utils import EngineArgs

argument = json.loads(sys.argv[1])
folder = Path(argument["folder"])
folder.mkdir(parents=True, exist_ok=True)
(folder / "config.json").write_text(json.dumps(argument["config"]))
results = {}
for name, case in argument["cases"].items():
    try:
        EngineArgs(model=str(folder), skip_tokenizer_init=True, **case).create_engine_config()
        results[name] = "accepted"
    except (AssertionError, ValueError) as error:
        results[name] = f"{type(error).__name__}: {error}"[:400]
print(json.dumps(results))
"""
VLLM_REFUSAL = "max_model_len"  # "User-specified max_model_len (...) is greater than ..."


def test_vllm_refuses_exactly_the_context_lengths_the_model_rule_refuses(tmp_path) -> None:
    config = json.loads(bundled_config(MODEL).read_text())
    cases: dict[str, dict[str, Any]] = {}
    expected: dict[str, bool] = {}
    for index, (overrides, max_model_len, code) in enumerate(HF_OVERRIDES):
        if code not in (None, "model-context-length"):
            continue
        name = f"{index}: {json.dumps(overrides)} at {max_model_len}"
        cases[name] = {"hf_overrides": overrides, "max_model_len": max_model_len}
        expected[name] = code is not None
    said = probe(BUILD, {"folder": str(tmp_path / "vllm"), "config": config, "cases": cases})
    disagreements = {
        name: {"app refuses": refuses, "vllm": said[name]}
        for name, refuses in expected.items()
        if refuses != (said[name] != "accepted") or (refuses and VLLM_REFUSAL not in said[name])
    }
    assert not disagreements, json.dumps(disagreements, indent=1)
    assert 2 <= sum(expected.values()) < len(expected)  # both verdicts were given
