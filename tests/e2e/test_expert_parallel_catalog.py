"""catalog/expert_parallel.py against the installed vLLM 0.26 and NIXL 1.3.1 (the image's): its
backend list is vLLM's, its EPLB pin passes vLLM's own EPLBConfig and is needed (vLLM's default
would be NIXL on UCX), and dual batch overlap needs exactly the backends the catalog names.

Read in a child interpreter like test_engine_options.py: importing vLLM imports Ray, which the
other e2e tests import only after the local cluster's environment is set."""

from __future__ import annotations

from typing import Any

import pytest
from installed_probe import probe

from catalog.expert_parallel import (
    ALL2ALL_BACKENDS,
    EPLB_CONFIG_ON_EFA,
    MICROBATCHING_ALL2ALL_BACKENDS,
)

# Runs in the child: prints one JSON object with what the installed packages say or do.
PROBE = r"""
import ast, importlib.util, inspect, json, sys, typing
from pathlib import Path
import vllm.config.parallel as parallel
import vllm.config.vllm as vllm_config
import vllm.distributed.eplb.eplb_communicator as eplb_communicator
from vllm.distributed import nixl_utils

pin = json.loads(sys.argv[1])
pin_error = None
try:
    accepted = parallel.EPLBConfig(**pin)
except Exception as error:
    pin_error = str(error)
async_error = None
try:
    parallel.EPLBConfig(**{**pin, "use_async": True})
except Exception as error:
    async_error = str(error)


def calls(module, name):
    tree = ast.parse(inspect.getsource(module))
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name]


def auto_communicators():
    # ParallelConfig.__post_init__: `if is_nixl_available(): communicator = "nixl"` ...
    tree = ast.parse(inspect.getsource(parallel.ParallelConfig.__post_init__).lstrip())
    chosen = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Call):
            condition = getattr(node.test.func, "id", None)
            for statement in node.body:
                if (isinstance(statement, ast.Assign)
                        and ast.unparse(statement.targets[0]) == "self.eplb_config.communicator"):
                    chosen.append([condition, ast.literal_eval(statement.value)])
    return chosen


def microbatching_backends():
    # VllmConfig: `if self.parallel_config.use_ubatching: assert a2a_backend in [...]`
    for node in ast.walk(ast.parse(inspect.getsource(vllm_config))):
        if (isinstance(node, ast.If)
                and ast.unparse(node.test) == "self.parallel_config.use_ubatching"):
            for statement in node.body:
                if isinstance(statement, ast.Assert):
                    return ast.literal_eval(statement.test.comparators[0])
    return None


nixl_cu13 = Path(importlib.util.find_spec("nixl_cu13").origin).parent
print(json.dumps({
    "all2all_backends": list(typing.get_args(parallel.All2AllBackend)),
    "pin_accepted": pin_error is None and accepted.communicator == pin["communicator"],
    "pin_error": pin_error,
    "async_error": async_error,
    "nixl_available": nixl_utils.is_nixl_available(),
    "auto_communicators": auto_communicators(),
    "nixl_agent_config_keywords": [
        sorted(k.arg for k in call.keywords)
        for call in calls(eplb_communicator, "nixl_agent_config")
    ],
    "nixl_default_backends": nixl_utils.nixl_agent_config(capture_telemetry=False).backends,
    "microbatching_backends": microbatching_backends(),
    "nixl_ep_installed": importlib.util.find_spec("nixl_ep") is not None,
    # The UCX transports the nixl-cu13 wheel bundles (what NIXL's UCX backend can use).
    "ucx_transports": sorted(
        path.name.split(".so")[0]
        for path in (nixl_cu13.parent / "nixl_cu13.libs" / "ucx").glob("libuct_*.so")
    ),
}))
"""


@pytest.fixture(scope="module")
def installed() -> dict[str, Any]:
    return probe(PROBE, EPLB_CONFIG_ON_EFA)


def test_the_catalog_judges_every_all2all_backend_of_the_installed_vllm(installed) -> None:
    assert sorted(installed["all2all_backends"]) == sorted(ALL2ALL_BACKENDS)


def test_vllms_eplb_config_accepts_the_pin_and_refuses_it_async(installed) -> None:
    assert installed["pin_accepted"], installed["pin_error"]
    # use_async: false is not a preference: vLLM refuses an NCCL communicator with async EPLB.
    assert installed["async_error"]
    assert "incompatible with async EPLB" in installed["async_error"]


def test_without_the_pin_vllm_would_move_expert_weights_with_nixl_on_ucx(installed) -> None:
    assert installed["nixl_available"]  # ray[llm] installs nixl, so the first branch is taken
    assert installed["auto_communicators"][0] == ["is_nixl_available", "nixl"]
    # vLLM's NIXL EPLB communicator passes no backends, so NIXL's default applies.
    assert installed["nixl_agent_config_keywords"] == [["capture_telemetry"]]
    assert installed["nixl_default_backends"] == ["UCX"]


def test_dual_batch_overlap_needs_exactly_the_backends_the_catalog_names(installed) -> None:
    assert sorted(installed["microbatching_backends"]) == sorted(MICROBATCHING_ALL2ALL_BACKENDS)


def test_nixl_ep_is_installed_but_ucx_drives_only_connectx_from_the_gpu(installed) -> None:
    """The image has NIXL EP (vLLM would load it); its GPU-initiated path needs a UCX transport
    with the GPU device API, and the bundled UCX has one, for mlx5 (ConnectX) only: EFA's
    transport (SRD) is there, host-driven, with no GPU-device variant."""
    assert installed["nixl_ep_installed"]
    transports = installed["ucx_transports"]
    assert "libuct_ib_efa" in transports
    device_transports = [name for name in transports if "gda" in name]
    assert device_transports
    assert all("mlx5" in name for name in device_transports)
