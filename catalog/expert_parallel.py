"""Expert-parallel communication in the Ray LLM image on EFA (vLLM 0.26.0)."""

from __future__ import annotations

SUPPORTED_ALL2ALL = "allgather_reducescatter"
# vLLM 0.26 vllm/config/parallel.py All2AllBackend: each value, None where it runs on EFA in the
# image, else why not.
ALL2ALL_BACKENDS: dict[str, str | None] = {
    "allgather_reducescatter": None,
    "naive": "removed in vLLM 0.26 (it falls back to allgather_reducescatter)",
    "pplx": "removed in vLLM 0.26 (it falls back to allgather_reducescatter)",
    "deepep_high_throughput": "DeepEP v1 needs NVSHMEM with InfiniBand GPU-initiated RDMA "
    "(IBGDA), which EFA does not offer",
    "deepep_low_latency": "DeepEP v1 needs NVSHMEM with InfiniBand GPU-initiated RDMA "
    "(IBGDA), which EFA does not offer",
    "deepep_v2": "DeepEP v2 over NCCL GIN needs EFA installer >= 1.50 and the DeepEP v2 "
    "kernels, neither of which the image ships",
    "mori_high_throughput": "MoRI kernels are for AMD ROCm GPUs",
    "mori_low_latency": "MoRI kernels are for AMD ROCm GPUs",
    "nixl_ep": "NIXL EP kernels are not in the image",
    "flashinfer_all2allv": "needs multi-node NVLink (GB200/GB300 NVL72), not EFA",
    "flashinfer_nvlink_two_sided": "needs multi-node NVLink (GB200/GB300 NVL72), not EFA",
    "flashinfer_nvlink_one_sided": "needs multi-node NVLink (GB200/GB300 NVL72), not EFA",
}
DUAL_BATCH_OVERLAP = (
    "vLLM 0.26 runs dual batch overlap only with the deepep or nixl_ep all-to-all backends "
    "(vllm/config/vllm.py), none of which runs on EFA in the image"
)
EPLB_CONFIG_ON_EFA: dict[str, object] = {"communicator": "pynccl", "use_async": False}
NCCL_ON_EFA_ENV: dict[str, str] = {}
