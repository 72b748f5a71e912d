"""The KV offload tier on prefill (serving.prefill.kv_offload_gib_per_gpu), held against the
image's vLLM 0.26 and Ray 2.58 themselves on a CPU: what the app renders for prefill (NIXL and
vLLM's OffloadingConnector under a MultiConnector) builds a whole vLLM engine config the way Ray
Serve LLM builds it on the GPU nodes, keeps the connector (no ``_post_init_kv_transfer_config``
replacement), decides the hybrid KV cache manager and the KV layout as decode's NIXL alone does
(both enter the NIXL handshake: nixl/metadata.py, base_worker.py), and Ray's connector backend
sets the MultiConnector up with NIXL's protocol first. And the engine options the app refuses
because they replace the connector are every field vLLM's method reads, from its source.

What a CPU cannot show: the tier's transfers (CUDA streams between GPU and pinned host memory),
NIXL's handshake itself, the TTFT a revisited prompt gains. Those need GPUs, and this session's
device budget was spent: docs/operating.md, "KV offload on prefill", says what is unmeasured.
No Ray cluster, no GPU, no model download; the packages run in a child interpreter
(installed_probe.probe), as in tests/e2e/test_engine_option_values.py."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from installed_probe import probe

from app_config import engine_options
from catalog.models import bundled_config
from serving_manifests.serve_config import render_serve_config
from tests.configurations import settings_for

TIER_GIB_PER_GPU = 16
ROLES = ("prefill", "decode")

# Runs in the child: argv[1] is {"model_dir": ..., "sides": {role: LLM config}}; prints what
# vLLM and Ray made of each side.
BUILD = """
import inspect, json, os, re, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
platforms._current_platform = CpuPlatform()  # no GPU here: vLLM's CPU platform stands in
from ray.llm._internal.serve.engines.vllm.kv_transfer import base as ray_base
from ray.llm._internal.serve.engines.vllm.vllm_engine import _normalize_vllm_engine_kwargs
from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
from ray.serve.llm import LLMConfig
from vllm.config import VllmConfig
from vllm.config.kv_transfer import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
from vllm.usage.usage_lib import UsageContext
from vllm.v1.kv_offload.factory import OffloadingSpecFactory

# Outside a Serve replica there is no replica rank for NIXL's side-channel port offset.
ray_base.BaseConnectorBackend._compute_port_offset = lambda self: 0

argument = json.loads(sys.argv[1])
results = {}
for role, side in argument["sides"].items():
    config = LLMConfig(
        model_loading_config={
            "model_id": side["model_loading_config"]["model_id"],
            "model_source": argument["model_dir"],
        },
        engine_kwargs=side["engine_kwargs"],
    )
    engine = VLLMEngineConfig.from_llm_config(config)
    kwargs = _normalize_vllm_engine_kwargs(engine.get_initialization_kwargs())
    built = AsyncEngineArgs(**kwargs).create_engine_config(
        usage_context=UsageContext.OPENAI_API_SERVER
    )
    transfer = built.kv_transfer_config
    cls = KVConnectorFactory.get_connector_class(transfer)
    result = {
        "connector": transfer.kv_connector,
        "kv_role": transfer.kv_role,
        "supports_hma": KVConnectorFactory.supports_hma_config(transfer),
        "hma_disabled": built.scheduler_config.disable_hybrid_kv_cache_manager,
        "kv_layout": cls.get_required_kvcache_layout(built),
    }
    if transfer.kv_connector == "MultiConnector":
        children = cls._get_connector_classes_and_configs(built)
        result["children"] = [child.__name__ for child, _ in children]
        result["children_engine_ids"] = [
            c.kv_transfer_config.engine_id == transfer.engine_id for _, c in children
        ]
        offload = children[1][1].kv_transfer_config.kv_connector_extra_config
        result["offload_spec"] = OffloadingSpecFactory.get_spec_cls(offload).__name__
        result["cpu_bytes_to_use"] = offload["cpu_bytes_to_use"]
    # Ray's side: the backend the replica sets up at engine start (llm_config.py
    # _setup_kv_connector_backend) and the one the P/D orchestrator shapes requests with.
    engine_id_before = config.engine_kwargs["kv_transfer_config"].get("engine_id")
    os.environ.pop("VLLM_NIXL_SIDE_CHANNEL_PORT", None)
    config.setup_engine_backend()
    backend = config.kv_connector_backend
    result["ray_backend"] = type(backend).__name__
    subs = getattr(backend, "_connector_backends", None)
    if subs is not None:
        result["ray_sub_backends"] = [type(sub).__name__ for sub in subs]
        result["ray_primary"] = type(backend._primary).__name__
        result["ray_engine_id_set"] = (
            config.engine_kwargs["kv_transfer_config"].get("engine_id") != engine_id_before
        )
    result["side_channel_port_set"] = "VLLM_NIXL_SIDE_CHANNEL_PORT" in os.environ
    results[role] = result

# Every CacheConfig field VllmConfig._post_init_kv_transfer_config reads, and whether each is an
# engine option (an EngineArgs field a user could set in engine_kwargs).
source = inspect.getsource(VllmConfig._post_init_kv_transfer_config)
read = sorted(set(re.findall(r"self\\.cache_config\\.(\\w+)", source)))
results["connector_replacing"] = read
results["engine_args"] = [name for name in read if name in EngineArgs.__dataclass_fields__]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def sides() -> dict[str, dict[str, Any]]:
    """The default configuration with a tier on prefill, rendered as synth renders it."""
    settings = settings_for("default", **{"serving.prefill.kv_offload_gib_per_gpu": "16"})
    (application,) = render_serve_config(settings)["applications"]
    return {role: application["args"][f"{role}_config"] for role in ROLES}


@pytest.fixture(scope="module")
def built(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    model_id = sides["prefill"]["model_loading_config"]["model_id"]
    config = bundled_config(model_id)
    if config is None:
        pytest.skip(f"no bundled config.json for {model_id} in catalog/model_configs")
    folder = Path(tempfile.mkdtemp(prefix="pd-llm-model-"))
    (folder / "config.json").write_text(config.read_text())
    return probe(BUILD, {"model_dir": str(folder), "sides": sides})


def test_prefill_builds_a_multiconnector_of_nixl_then_the_cpu_tier(
    built: dict[str, Any], sides: dict[str, dict[str, Any]]
) -> None:
    prefill = built["prefill"]
    assert (prefill["connector"], prefill["kv_role"]) == ("MultiConnector", "kv_both")
    # vLLM 0.26's "NixlConnector" is its pull connector class (nixl/connector.py).
    assert prefill["children"] == ["NixlPullConnector", "OffloadingConnector"]
    assert prefill["children_engine_ids"] == [True, True]  # vLLM gives them the parent's
    assert prefill["offload_spec"] == "CPUOffloadingSpec"
    kwargs = sides["prefill"]["engine_kwargs"]
    rank_gpus = kwargs["tensor_parallel_size"] * kwargs["pipeline_parallel_size"]
    assert prefill["cpu_bytes_to_use"] == TIER_GIB_PER_GPU * rank_gpus * 2**30


def test_decode_keeps_nixl_alone(built: dict[str, Any]) -> None:
    assert built["decode"]["connector"] == "NixlConnector"
    assert "children" not in built["decode"]


def test_what_the_nixl_handshake_compares_is_decided_alike_on_both_sides(
    built: dict[str, Any],
) -> None:
    """The hybrid KV cache manager (in the compatibility hash) and the KV layout (compared per
    handshake) come out as for NIXL alone: both children support HMA and ask for HND."""
    prefill, decode = built["prefill"], built["decode"]
    assert prefill["supports_hma"] is decode["supports_hma"] is True
    assert prefill["hma_disabled"] == decode["hma_disabled"]
    assert prefill["kv_layout"] == decode["kv_layout"] == "HND"


def test_rays_backend_sets_up_nixl_first_and_shapes_pd_requests_by_it(
    built: dict[str, Any],
) -> None:
    prefill = built["prefill"]
    assert prefill["ray_backend"] == "MultiConnectorBackend"
    assert prefill["ray_sub_backends"] == ["NixlConnectorBackend", "DefaultConnectorBackend"]
    assert prefill["ray_primary"] == "NixlConnectorBackend"
    assert prefill["side_channel_port_set"] is True
    # Ray writes NIXL's host-port engine id into its sub-config's copy only: vLLM's own
    # per-engine uuid (config/kv_transfer.py) is what the children share, unique all the same.
    assert prefill["ray_engine_id_set"] is False
    assert built["decode"]["ray_backend"] == "NixlConnectorBackend"


def test_the_options_refused_for_replacing_the_connector_are_every_one_vllm_reads(
    built: dict[str, Any],
) -> None:
    assert built["connector_replacing"] == sorted(engine_options.CONNECTOR_REPLACING)
    assert built["engine_args"] == built["connector_replacing"]
