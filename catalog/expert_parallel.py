"""Expert parallel on EFA: what the Ray LLM image (Ray 2.58, vLLM 0.26) can run between nodes.

A MoE replica that spans nodes moves tokens to their experts (the all-to-all), rebalances expert
weights (EPLB) and syncs its data-parallel ranks over the network between the nodes, which on
these instances is EFA. vLLM 0.26 offers twelve all-to-all backends; one of them runs here.

What the image holds (it cannot be pulled here; this rests on its build files and wheel pins):
- aws/deep-learning-containers docker/ray_llm/pyproject.toml (the GA Ray LLM v1.0 build): the
  venv installs ray[default,serve,llm]==2.58.0, vllm==0.26.0, torch==2.11.0 and nothing for
  expert parallel: no deep_ep, no pplx, no mori. ray-2.58.0's METADATA pins nixl==1.3.1 (extra
  "llm"), and the nixl-cu13 1.3.1 wheel carries nixl_ep (nixl_cu13-1.3.1.dist-info/RECORD:
  nixl_ep_cu13/...). torch 2.11.0 pins nvidia-nccl-cu13==2.28.9 and nvidia-nvshmem-cu13==3.4.5
  (torch-2.11.0 METADATA); the image's LD_LIBRARY_PATH puts that NCCL first (Dockerfile.cuda).
- docker/ray_llm/Dockerfile.cuda: EFA installer 1.49.0 (catalog/ray_llm_image.py), which puts
  the aws-ofi-nccl plugin in /opt/amazon/ofi-nccl (on the image's LD_LIBRARY_PATH); ENV
  FI_PROVIDER=efa and NCCL_DEBUG=INFO; /etc/nccl.conf gets NCCL_SOCKET_IFNAME=^docker0,lo
  (scripts/docker/common/install_efa_amzn2023.sh).
The same packages at the same versions are in the e2e venv (make e2e), where
tests/e2e/test_expert_parallel_catalog.py reads vLLM's own rules.
"""

from __future__ import annotations

from catalog.ray_llm_image import DEFAULT_IMAGE, VLLM

# vLLM 0.26's `All2AllBackend` Literal (vllm/config/parallel.py), each mapped to None when it runs
# in the image over EFA, or to why not and what it would take. A vLLM bump that adds a name fails
# tests/config/test_expert_parallel_catalog.py until the name has a verdict here.
ALL2ALL_BACKENDS: dict[str, str | None] = {
    # vllm/distributed/device_communicators/all2all.py AgRsAll2AllManager: dispatch is an
    # all-gather and combine a reduce-scatter on the DP (or EP) group's NCCL communicator, which
    # aws-ofi-nccl carries over EFA like every other NCCL collective (NCCL_ON_EFA_ENV below).
    "allgather_reducescatter": None,
    # config/parallel.py _validate_parallel_config: "has been removed. Falling back to
    # 'allgather_reducescatter'" (a warning, then the other backend runs).
    "naive": (
        f"{VLLM} has no naive backend any more and silently runs allgather_reducescatter in its "
        "place, so set allgather_reducescatter"
    ),
    "pplx": (
        f"{VLLM} has no pplx backend any more and silently runs allgather_reducescatter in its "
        "place, so set allgather_reducescatter"
    ),
    # deepseek-ai/DeepEP v1.2.1 csrc/kernels/internode_ll.cu calls nvshmemi_ibgda_put_nbi_warp
    # (csrc/kernels/ibgda_device.cuh) and deep_ep/buffer.py sets NVSHMEM_IB_ENABLE_IBGDA=1 with
    # RC queue pairs per peer; DeepEP/docs/legacy.md: "fully tested with InfiniBand" (RoCE:
    # "theoretically compatible").
    "deepep_high_throughput": (
        "DeepEP v1's kernels post InfiniBand RDMA writes from the GPU through NVSHMEM's IBGDA "
        "transport (reliable-connected queue pairs on ConnectX NICs), which EFA's SRD devices do "
        "not provide, and the image has no deep_ep package; use allgather_reducescatter"
    ),
    "deepep_low_latency": (
        "DeepEP v1's kernels post InfiniBand RDMA writes from the GPU through NVSHMEM's IBGDA "
        "transport (reliable-connected queue pairs on ConnectX NICs), which EFA's SRD devices do "
        "not provide, and the image has no deep_ep package; use allgather_reducescatter"
    ),
    # DeepEP README (V2): "switched from the NVSHMEM backend to the more lightweight NCCL Gin
    # backend", needs NCCL 2.30.4+; vLLM utils/import_utils.py has_deep_ep_v2 checks the runtime
    # NCCL against 2.30.4. aws-ofi-nccl doc/gin-getting-started.md: GIN on EFA from plugin 1.21
    # with NCCL 2.31.2-1+ and GDRCopy 2.5+. EC2 "Elastic Fabric Adapter release notes": installer
    # 1.50.0 is the first with plugin 1.21 (1.21.1).
    "deepep_v2": (
        "DeepEP v2 runs over NCCL's GPU-initiated networking (GIN), which on EFA needs the "
        "aws-ofi-nccl 1.21 plugin of EFA installer 1.50 or later with NCCL 2.31.2 or later, "
        "while the image has EFA installer 1.49, NCCL 2.28.9 and no deep_ep package; it needs "
        "an image built with all three"
    ),
    # ROCm/mori, whose README asks for ROCm >= 6.4, offers building blocks for IBGDA and lists
    # "Supported NICs: AMD Pensando DSC, Broadcom Thor2, NVIDIA Mellanox ConnectX-7" (vLLM's
    # MoriAll2AllManager asserts has_mori(): "MoRI kernels not found").
    "mori_high_throughput": (
        "MoRI is AMD's ROCm expert-parallel library, for AMD GPUs with GPU-initiated RDMA on "
        "Pensando, Thor2 or ConnectX-7 NICs, not for these instances' NVIDIA GPUs and EFA, and "
        "the image has no mori package; use allgather_reducescatter"
    ),
    "mori_low_latency": (
        "MoRI is AMD's ROCm expert-parallel library, for AMD GPUs with GPU-initiated RDMA on "
        "Pensando, Thor2 or ConnectX-7 NICs, not for these instances' NVIDIA GPUs and EFA, and "
        "the image has no mori package; use allgather_reducescatter"
    ),
    # ai-dynamo/nixl v1.3.1 examples/device/ep/README.md: "built on top of NIXL's device API";
    # csrc/nixl_ep.cpp creates the "UCX" backend with ucx_num_device_channels, and meson.build
    # enables the device API only with UCX's ucp/api/device headers. The UCX that the nixl-cu13
    # 1.3.1 wheel bundles has one GPU-device transport, libuct_ib_mlx5_gda (GDAKI on ConnectX);
    # its EFA transport (libuct_ib_efa, SRD) is host-initiated only. deepseek-ai/DeepEP#659 asks
    # the same of HybridEP's NIXL path (open).
    "nixl_ep": (
        f"NIXL EP (in the image's nixl {DEFAULT_IMAGE.nixl_version}) drives GPU-initiated RDMA "
        "through UCX's GPU device API, which UCX implements only for ConnectX NICs (mlx5 GDA), "
        "not for EFA; it would need "
        f"a NIXL device backend for EFA, which NIXL {DEFAULT_IMAGE.nixl_version} does not have"
    ),
    # vllm/config/parallel.py: "temporary alias for flashinfer_nvlink_two_sided".
    "flashinfer_all2allv": (
        "this deprecated alias of flashinfer_nvlink_two_sided moves tokens over NVLink only, so "
        "every expert-parallel rank must share one NVLink domain (one node here, or a GB200/GB300 "
        "NVL72 rack), and nothing goes over EFA between nodes; use allgather_reducescatter"
    ),
    # flashinfer 0.6.14 comm/mnnvl.py: MnnvlMemory maps peers' GPU memory through CUDA VMM
    # handles (FABRIC on GB200, POSIX file descriptors on x86), i.e. over NVLink.
    "flashinfer_nvlink_two_sided": (
        "FlashInfer's multi-node-NVLink kernels move tokens over NVLink only, so every "
        "expert-parallel rank must share one NVLink domain (one node here, or a GB200/GB300 NVL72 "
        "rack), and nothing goes over EFA between nodes; use allgather_reducescatter"
    ),
    "flashinfer_nvlink_one_sided": (
        "FlashInfer's multi-node-NVLink kernels move tokens over NVLink only, so every "
        "expert-parallel rank must share one NVLink domain (one node here, or a GB200/GB300 NVL72 "
        "rack), and nothing goes over EFA between nodes; use allgather_reducescatter"
    ),
}

SUPPORTED_ALL2ALL_BACKENDS: tuple[str, ...] = tuple(
    name for name, refusal in ALL2ALL_BACKENDS.items() if refusal is None
)

# vllm/config/vllm.py (VllmConfig.__post_init__): when parallel_config.use_ubatching (enable_dbo,
# or ubatch_size > 1) it asserts all2all_backend is one of these.
MICROBATCHING_ALL2ALL_BACKENDS: tuple[str, ...] = (
    "deepep_low_latency",
    "deepep_high_throughput",
    "nixl_ep",
)
DUAL_BATCH_OVERLAP_REFUSAL = (
    "dual batch overlap (enable_dbo, or ubatch_size above 1) needs the deepep_low_latency, "
    f"deepep_high_throughput or nixl_ep all-to-all backend ({VLLM} asserts it), and none of "
    "them runs over EFA in this image; leave it off"
)

# EPLB's expert-weight moves, as vLLM 0.26's EPLBConfig takes them (engine_kwargs.eplb_config).
EPLB_CONFIG_ON_EFA: dict[str, str | bool] = {"communicator": "pynccl", "use_async": False}
EPLB_CONFIG_REASONS: dict[str, str] = {
    # config/parallel.py ParallelConfig.__post_init__: with communicator unset, "nixl" whenever
    # the nixl package is importable (it is: ray[llm] installs it), else torch_gloo.
    # distributed/eplb/eplb_communicator.py NixlEplbCommunicator builds its agent with
    # nixl_agent_config(capture_telemetry=False), whose backends default to ["UCX"]
    # (nixl_cu13/_api.py); vLLM offers no setting for another NIXL backend there, unlike the KV
    # connector's kv_connector_extra_config.backends (LIBFABRIC here). UCX over EFA falls back to
    # a slow path in reported builds (ai-dynamo/nixl#909, ray-project/ray#62339); torch_gloo
    # stages through host memory over TCP; torch_nccl's batched isend/irecv hangs under load
    # (vLLM's own comment, pytorch/pytorch#174288). pynccl is ncclSend/ncclRecv in a group on
    # vLLM's own NCCL communicator: the EFA path every other collective here takes.
    "communicator": (
        "pynccl moves expert weights with NCCL over aws-ofi-nccl, the same EFA path as the "
        "all-to-all; vLLM's default when NIXL is installed is NIXL on its UCX backend, which "
        "vLLM gives no setting to change and which is not the EFA path the KV transfer uses"
    ),
    # config/parallel.py EPLBConfig._validate_eplb_config: "pynccl communicator is incompatible
    # with async EPLB due to NCCL multi-stream conflicts".
    "use_async": (
        "vLLM refuses async EPLB with an NCCL communicator (multi-stream conflicts), so the "
        "weight moves run in the engine step every step_interval steps"
    ),
}

# The environment of every worker pod on an EFA node, so that vLLM's NCCL traffic (the
# all-to-all, EPLB's moves, TP/PP, the DP ranks' sync) rides EFA through aws-ofi-nccl or fails
# at communicator creation instead of quietly using TCP sockets. libfabric's own settings
# (FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1, FI_EFA_FORK_SAFE=1) are already in
# manifests/rayservice.yaml's worker env; NCCL_DEBUG stays the image's INFO, whose
# "via NET/Libfabric" lines show the path a channel took.
NCCL_ON_EFA_ENV: dict[str, str] = {
    # NCCL 2.28.9 src/plugin/net.cc ncclNetInit: with NCCL_NET set, only a network whose name
    # matches it (strcasecmp) is initialized, the built-in IB and Socket ones included; if none
    # comes up: "Failed to initialize any NET plugin", ncclInvalidUsage. aws-ofi-nccl's NVIDIA
    # interface has been named "Libfabric" since 1.13.0 (commit 7c014f0d, "nvidia: Change default
    # network name to Libfabric"; still so at 1.21.1), and the EFA installer has bundled the
    # plugin since 1.39 (plugin 1.14: mosaicml/composer#3844; EC2's EFA release notes list
    # libnccl-ofi 1.14.2 in 1.40.0), so every installer that ships it, 1.49 included, names it
    # so. ("AWS Libfabric" is the Neuron build's name, and the NVIDIA one's before 1.13.) The
    # image finds the plugin by NCCL's default search: the DLC's own multi-node EKS test
    # (aws/deep-learning-containers test/ray-llm/eks-multi-node/run_eks_test.sh) greps the
    # workers' logs for "Using network (AWS )?Libfabric" and fails on "NET/Socket: Using".
    "NCCL_NET": "Libfabric",
    # NCCL's bootstrap and out-of-band sockets. Under containerd (EKS AMIs) the pod's interface
    # is eth0 (containerd internal/cri/server/helpers.go defaultIfName), the VPC CNI's address;
    # EFA devices have no netdev in the pod. The image's /etc/nccl.conf only excludes docker0
    # and lo; the environment wins over it (NCCL src/misc/param.cc: setenv without overwrite).
    "NCCL_SOCKET_IFNAME": "eth0",
}
