"""The engine-option list the CDK app checks against (catalog/vllm_engine_args.json) is what the
image's Ray Serve LLM and vLLM accept, read from the installed packages themselves; and the
examples' options pass Ray's own sorting into vLLM's argument classes. No Ray cluster needed."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import yaml
from harness import PROJECT_ROOT

ARGS = json.loads((PROJECT_ROOT / "catalog" / "vllm_engine_args.json").read_text())
EXAMPLES = sorted((PROJECT_ROOT / "examples").glob("*.yaml"))


def test_the_shipped_list_is_the_installed_vllms_argument_classes() -> None:
    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import BaseFrontendArgs, FrontendArgs

    assert vllm.__version__ == ARGS["vllm_version"]
    assert {f.name for f in dataclasses.fields(AsyncEngineArgs)} == set(ARGS["engine_args"])
    assert {f.name for f in dataclasses.fields(BaseFrontendArgs)} == set(ARGS["frontend_args"])
    frontend = {f.name for f in dataclasses.fields(FrontendArgs)}
    assert frontend - set(ARGS["frontend_args"]) == set(ARGS["server_args"])


def test_the_shipped_parsers_are_the_ones_vllm_registers() -> None:
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    assert set(ARGS["tool_call_parsers"]) <= set(ToolParserManager.list_registered())
    assert set(ARGS["reasoning_parsers"]) <= set(ReasoningParserManager.list_registered())


def _side_options(example: dict[str, Any], role: str) -> dict[str, Any]:
    serving = example.get("serving", {})
    return {**serving.get("engine_options", {}), **serving.get(role, {}).get("engine_options", {})}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_an_examples_options_reach_vllms_argument_classes_through_ray(path, role: str) -> None:
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
    from ray.serve.llm import LLMConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import FrontendArgs

    options = _side_options(yaml.safe_load(path.read_text()), role)
    assert options
    config = LLMConfig(model_loading_config={"model_id": "Qwen/Qwen3-8B"}, engine_kwargs=options)
    engine = VLLMEngineConfig.from_llm_config(config)  # raises "Unknown engine argument"
    assert {**engine.engine_kwargs, **engine.frontend_kwargs} == options
    FrontendArgs(**engine.frontend_kwargs)
    AsyncEngineArgs(model="Qwen/Qwen3-8B", **engine.engine_kwargs)
