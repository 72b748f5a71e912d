"""Which direction the KV cache travels between two engines on one GPU.

The deployed connector is vLLM's ``NixlConnector``, in vLLM 0.26 an alias of
``NixlPullConnector``: decode READs prefill's blocks (kv_connector/v1/nixl/connector.py,
pull_worker.py). Between two nodes on EFA that is an RDMA read at line rate. Between two
processes on one GPU there is no EFA device, so NIXL runs on UCX, and UCX's ``cuda_ipc`` transport
serves remote WRITE but not remote READ, which falls back to a TCP relay through host memory
(vllm-project/vllm#52607; nixl#1097). The 2026-12-02 run measured that relay: about 0.4 GB/s, the
ceiling of every P/D figure, so the Serve path's own cost was hidden under a 440 ms transfer.

``push`` makes each side vLLM 0.26's ``NixlPushConnector`` (push_scheduler.py, push_worker.py):
the same request protocol (prefill answers with its blocks' coordinates, decode registers its
own blocks with prefill, prefill WRITEs into them), so Ray Serve LLM's P/D orchestration is
unchanged. Ray Serve LLM 2.58 registers no backend for that connector name and falls back to its
``DefaultConnectorBackend`` (engines/vllm/kv_transfer/factory.py), which has the same P/D
protocol (``DefaultPDProtocolMixin``) but does not choose a NIXL side-channel port, so each Ray
node is started with its own (``side_channel_environment``).

Status, 2026-12-02 (one H200, vLLM 0.26.0, nixl-cu13 1.3.1): ``push`` does not work on this
build. Prefill answered, decode's NIXL handshake passed, and prefill's WRITE never arrived; the
request waited until its timeout. The default is therefore ``pull``, the deployed direction.

The READ falls back to TCP because of one UCX setting, not a missing transport: UCX's cuda_ipc
offers GET zero-copy only where it detects NVLink (``UCX_CUDA_IPC_ENABLE_GET_ZCOPY``, default
``auto``, "Enable get operations except for platforms known to have slower performance":
src/uct/cuda/cuda_ipc/cuda_ipc_iface.c's config table; openucx/ucx#7566 limited GET to NVLink
platforms; ai-dynamo/nixl#2208 turns it on in NIXL's UCX plugin after 1.3.1). Two processes on one
GPU have no NVLink between them, so ``auto`` means off. ``GET_ZCOPY_ENVIRONMENT`` sets it on for
every engine process and Ray node, and is listed among the run's changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app_config.node_labels import GPU_ROLES
from serving_manifests.serve_config import nixl_connector
from tools.gpu_check.engines import SIDE_CHANNEL_PORTS
from tools.gpu_check.one_gpu import LOOPBACK, Change

PUSH_CONNECTOR = "NixlPushConnector"
DIRECTIONS = ("push", "pull")
PUSH_REASON = (
    "one GPU, no EFA: NIXL on UCX serves a remote READ between two processes by a TCP relay "
    "(cuda_ipc serves WRITE only, vllm#52607; 0.4 GB/s measured 2026-12-02), so prefill "
    "pushes the KV cache instead (vLLM 0.26 NixlPushConnector, same P/D protocol)"
)
# The one-GPU transport: decode's READ over cuda_ipc instead of UCX's TCP relay (module docstring).
GET_ZCOPY_ENVIRONMENT = {"UCX_CUDA_IPC_ENABLE_GET_ZCOPY": "y"}
GET_ZCOPY_REASON = (
    "one GPU, no NVLink between the two engine processes: UCX's cuda_ipc offers a remote READ "
    "only where it detects NVLink (ENABLE_GET_ZCOPY=auto, uct/cuda/cuda_ipc/cuda_ipc_iface.c), so "
    "decode's READ (the deployed pull direction) fell back to a TCP relay (0.4 GB/s, vllm#52607)"
)
# Ray nodes take ports of their own, clear of the direct engines' (tools/gpu_check/engines.py).
RAY_NODE_PORT_OFFSET = 1000


def choose(
    serve_config: dict[str, Any], direction: str, deployed: Mapping[str, Any]
) -> list[Change]:
    """Set both sides' connector for ``direction`` in place; the changes against ``deployed``
    (the synthesized config), none for ``pull``."""
    if direction not in DIRECTIONS:
        raise ValueError(f"hand-off direction {direction!r}: one of {', '.join(DIRECTIONS)}")
    (application,) = serve_config["applications"]
    (deployed_application,) = deployed["applications"]
    changes = []
    for role in GPU_ROLES:
        # The NIXL connector: the side's whole kv_transfer_config, or the first connector of the
        # MultiConnector that adds prefill's KV offload tier (which keeps its place).
        transfer, path = nixl_connector(
            application["args"][f"{role}_config"]["engine_kwargs"]["kv_transfer_config"]
        )
        synthesized = nixl_connector(
            deployed_application["args"][f"{role}_config"]["engine_kwargs"]["kv_transfer_config"]
        )[0]["kv_connector"]
        transfer["kv_connector"] = PUSH_CONNECTOR if direction == "push" else synthesized
        if transfer["kv_connector"] != synthesized:
            changes.append(
                Change(
                    f"{role}_config.engine_kwargs.kv_transfer_config{path}.kv_connector",
                    synthesized,
                    transfer["kv_connector"],
                    PUSH_REASON,
                )
            )
    return changes


def transport_environment(get_zcopy: bool) -> dict[str, str]:
    """The UCX environment of every engine process and Ray node of the run."""
    return dict(GET_ZCOPY_ENVIRONMENT) if get_zcopy else {}


def transport_changes(get_zcopy: bool) -> list[str]:
    """The run's list of changes for the transport, in the shape of the config changes."""
    return [
        f"environment {name}: unset -> {value!r} ({GET_ZCOPY_REASON})"
        for name, value in transport_environment(get_zcopy).items()
    ]


def side_channel_environment(role: str, node_index: int = 0) -> dict[str, str]:
    """The NIXL side channel of the Ray node that hosts ``role``'s engine: Ray Serve LLM sets one
    only for the ``NixlConnector`` name (NixlConnectorBackend, kv_transfer/nixl.py), and leaves a
    preset one alone, so a node-wide setting serves both directions. A side's further nodes on
    the same host (``node_index`` 1, 2, ...) take the next ports."""
    port = SIDE_CHANNEL_PORTS[role] + RAY_NODE_PORT_OFFSET + node_index
    return {"VLLM_NIXL_SIDE_CHANNEL_HOST": LOOPBACK, "VLLM_NIXL_SIDE_CHANNEL_PORT": str(port)}
