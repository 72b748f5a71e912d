"""The engines' count the latency policy reads as a side's load (serve_extensions/latency_servers.py
`engine_requests`) is read through private attributes of the installed Ray and vLLM: Ray 2.58's
VLLMEngine keeps the vLLM AsyncLLM it starts as `_engine_client`, AsyncLLM keeps its
OutputProcessor as `output_processor`, whose `get_num_unfinished_requests()` counts its
`request_states`. The stand-in engine of this tier answers the same path, so only this module
holds the path to the real classes: an upgrade that renames one fails here, where the policy
would otherwise fall back to Serve's count without a word. Run in a fork of the session's probe
server (installed_probe.py), with the real classes built without an engine behind them."""

from __future__ import annotations

from typing import Any

import pytest
from harness import PROJECT_ROOT
from installed_probe import probe

READ = """
import inspect, json, sys
sys.path.insert(0, json.loads(sys.argv[1]))
from ray.llm._internal.serve.engines.vllm.vllm_engine import VLLMEngine
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.output_processor import OutputProcessor
from serve_extensions.latency_servers import engine_requests

processor = OutputProcessor.__new__(OutputProcessor)
processor.request_states = {"a": None, "b": None, "c": None}
client = AsyncLLM.__new__(AsyncLLM)
client.output_processor = processor
engine = VLLMEngine.__new__(VLLMEngine)
engine._engine_client = client
print(json.dumps({
    "three_requests_held": engine_requests(engine),
    "engine_not_started": engine_requests(VLLMEngine.__new__(VLLMEngine)),
    "ray_keeps_the_client": "self._engine_client = self._start_async_llm_engine("
    in inspect.getsource(VLLMEngine),
    "ray_starts_an_async_llm": "AsyncLLM" in inspect.getsource(VLLMEngine._start_async_llm_engine),
    "vllm_keeps_the_processor": "self.output_processor = OutputProcessor("
    in inspect.getsource(AsyncLLM.__init__),
}))
"""


@pytest.fixture(scope="module")
def read() -> dict[str, Any]:
    return probe(READ, str(PROJECT_ROOT))


def test_the_count_is_the_requests_vllms_output_processor_holds(read: dict[str, Any]) -> None:
    assert read["three_requests_held"] == 3


def test_an_engine_not_yet_started_reports_no_count(read: dict[str, Any]) -> None:
    assert read["engine_not_started"] is None


@pytest.mark.parametrize(
    "link", ["ray_keeps_the_client", "ray_starts_an_async_llm", "vllm_keeps_the_processor"]
)
def test_each_link_of_the_path_is_where_the_installed_sources_put_it(
    read: dict[str, Any], link: str
) -> None:
    assert read[link], link
