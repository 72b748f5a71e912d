"""How the KV cache moves between the sides."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from app_config.errors import Finding
from app_config.rules import WARNING, Rule

if TYPE_CHECKING:
    from app_config.model import Settings


def ucx_on_efa(settings: Settings) -> Iterator[Finding]:
    backend = settings.serving.kv_transfer.backend
    if backend == "UCX" and settings.gpu_nodes.shared is None:
        yield Finding(
            "serving.kv_transfer.backend",
            "on EFA, UCX silently falls back to a slow path (time to first token of tens of "
            "seconds, no error). Use LIBFABRIC.",
            backend,
        )


def offload_on_decode(settings: Settings) -> Iterator[Finding]:
    """The KV offload tier is for prefill only. Decode's every request carries
    ``do_remote_prefill`` (Ray 2.58 prefill_decode: decode forwards the kv_transfer_params of
    prefill's response), so NIXL, the first connector, claims from prefill all of a prompt's
    KV that decode's own GPU cache lacks (vLLM 0.26 nixl/pull_scheduler.py
    ``get_num_new_matched_tokens``), and vLLM's MultiConnector loads from that first claimant
    only (multi_connector.py ``get_num_new_matched_tokens``): a tier on decode would be
    stored to and never read, at the cost of its node memory."""
    size = settings.serving.decode.kv_offload_gib_per_gpu
    if size:
        yield Finding(
            "serving.decode.kv_offload_gib_per_gpu",
            "decode reads every prompt's KV from prefill over NIXL, which vLLM's MultiConnector "
            "asks first, so a CPU tier there would be written and never read; set it on "
            "prefill (serving.prefill.kv_offload_gib_per_gpu), where a revisited prompt's "
            "evicted prefix is read back instead of computed again",
            size,
        )


def shared_nodes_backend(settings: Settings) -> Iterator[Finding]:
    """On shared nodes the KV cache moves between two engines of one pod, GPU to GPU of one
    node. NIXL 1.3.1's LIBFABRIC backend is the app's EFA path (it pairs each GPU with EFA
    devices, catalog/efa_layout.py); UCX's cuda_ipc transport copies GPU to GPU over NVLink or
    PCIe with no NIC in the path, and is what vLLM's NIXL connector defaults to (vLLM 0.26
    nixl/base_worker.py: backends default ["UCX"]). The app renders UCX's settings for it
    (serving_manifests/rayservice.py SHARED_NODE_UCX_ENV; docs/architecture.md, 'Prefill and
    decode on one node')."""
    backend = settings.serving.kv_transfer.backend
    if settings.gpu_nodes.shared is not None and backend != "UCX":
        yield Finding(
            "serving.kv_transfer.backend",
            f"{backend} is NIXL's EFA path, but on gpu_nodes.shared both sides' engines run in "
            "one pod of one node: use UCX, whose cuda_ipc transport copies the KV cache GPU "
            "to GPU inside the node (the app renders the UCX settings for it)",
            backend,
        )


RULES = (
    Rule("shared-nodes-backend", frozenset({"serving", "gpu_nodes"}), shared_nodes_backend),
    Rule("ucx-on-efa", frozenset({"serving", "gpu_nodes"}), ucx_on_efa, WARNING, stack="serving"),
    Rule("kv-offload-decode", frozenset({"serving"}), offload_on_decode),
)
