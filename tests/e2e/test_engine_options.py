"""The engine-option list the CDK app checks against (catalog/vllm_engine_args.json) is what the
image's Ray Serve LLM and vLLM accept, read from the installed packages themselves; and the
examples' options pass Ray's own sorting into vLLM's argument classes. No Ray cluster needed.

The packages are read in a child interpreter: importing vLLM imports Ray, and the other e2e
tests need Ray imported only after the local cluster's environment is set (harness.LocalRay)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import PROJECT_ROOT
from installed_probe import probe

ARGS = json.loads((PROJECT_ROOT / "catalog" / "vllm_engine_args.json").read_text())
EXAMPLES = sorted((PROJECT_ROOT / "examples").glob("*.yaml"))
ROLES = ("prefill", "decode")

# Runs in the child: prints one JSON object with what the installed packages say.
PROBE = """
import dataclasses, json, sys
import vllm
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.openai.cli_args import BaseFrontendArgs, FrontendArgs
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
from ray.serve.llm import LLMConfig

sorted_options = {}
for key, options in json.loads(sys.argv[1]).items():
    config = LLMConfig(model_loading_config={"model_id": "Qwen/Qwen3-8B"}, engine_kwargs=options)
    engine = VLLMEngineConfig.from_llm_config(config)  # raises "Unknown engine argument"
    FrontendArgs(**engine.frontend_kwargs)
    AsyncEngineArgs(model="Qwen/Qwen3-8B", **engine.engine_kwargs)
    sorted_options[key] = {**engine.engine_kwargs, **engine.frontend_kwargs}
print(json.dumps({
    "version": vllm.__version__,
    "engine_args": sorted(f.name for f in dataclasses.fields(AsyncEngineArgs)),
    "base_frontend_args": sorted(f.name for f in dataclasses.fields(BaseFrontendArgs)),
    "frontend_args": sorted(f.name for f in dataclasses.fields(FrontendArgs)),
    "tool_call_parsers": sorted(ToolParserManager.list_registered()),
    "reasoning_parsers": sorted(ReasoningParserManager.list_registered()),
    "sorted_options": sorted_options,
}))
"""


def _side_options(example: dict[str, Any], role: str) -> dict[str, Any]:
    serving = example.get("serving", {})
    return {**serving.get("engine_options", {}), **serving.get(role, {}).get("engine_options", {})}


def _key(path: Path, role: str) -> str:
    return f"{path.stem}:{role}"


OPTIONS = {
    _key(path, role): _side_options(yaml.safe_load(path.read_text()), role)
    for path in EXAMPLES
    for role in ROLES
}


@pytest.fixture(scope="module")
def installed() -> dict[str, Any]:
    return probe(PROBE, OPTIONS)


def test_the_shipped_list_is_the_installed_vllms_argument_classes(installed) -> None:
    assert installed["version"] == ARGS["vllm_version"]
    assert set(installed["engine_args"]) == set(ARGS["engine_args"])
    assert set(installed["base_frontend_args"]) == set(ARGS["frontend_args"])
    frontend = set(installed["frontend_args"])
    assert frontend - set(ARGS["frontend_args"]) == set(ARGS["server_args"])


def test_the_shipped_list_is_what_the_installed_vllms_source_generates() -> None:
    """The generator (tools/vllm_engine_args.py, which parses vLLM's source without importing
    it) run on the installed vLLM gives exactly the shipped file."""
    import importlib.util

    from tools import vllm_engine_args

    spec = importlib.util.find_spec("vllm")
    assert spec is not None
    assert spec.origin is not None
    source = Path(spec.origin).parent.parent  # site-packages, holding vllm/
    regenerated = vllm_engine_args.generate(source)
    assert regenerated == ARGS, "run python -m tools.vllm_engine_args <vllm source>"


def test_the_shipped_parsers_are_the_ones_vllm_registers(installed) -> None:
    assert set(ARGS["tool_call_parsers"]) <= set(installed["tool_call_parsers"])
    assert set(ARGS["reasoning_parsers"]) <= set(installed["reasoning_parsers"])


# Every side of an example that sets engine options (an example without any, such as
# existing-vpc's, has nothing to hand over; its side's options are vLLM's defaults).
SIDES_WITH_OPTIONS = [
    pytest.param(path, role, id=f"{role}-{path.stem}")
    for path in EXAMPLES
    for role in ROLES
    if OPTIONS[_key(path, role)]
]


def test_most_examples_set_engine_options() -> None:
    """The check below is not vacuous: the examples set options on most of their sides."""
    assert len(SIDES_WITH_OPTIONS) >= len(EXAMPLES)


@pytest.mark.parametrize(("path", "role"), SIDES_WITH_OPTIONS)
def test_an_examples_options_reach_vllms_argument_classes_through_ray(
    installed, path: Path, role: str
) -> None:
    options = OPTIONS[_key(path, role)]
    assert installed["sorted_options"][_key(path, role)] == options
