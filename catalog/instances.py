"""GPU instance types this app can run prefill and decode on, with the facts the layout needs.

Sources (AWS documentation, checked 2026-10):
- [specs] EC2 user guide, "Accelerated computing instance specifications"
  https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html (GPUs, GPU memory, instance store)
- [net] EC2 user guide, "Network specifications - accelerated computing"
  https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html#ac_network (network cards, bandwidth)
- [efa] EC2 user guide, "Maximize network bandwidth on Amazon EC2 instances with multiple network
  cards" / "EFA for accelerated instance types"
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html (one EFA per network
  card; EFA-only interfaces on every EFA-capable instance since 2024-10)
- [nvidia] NVIDIA A100, H100/H200 and B200 datasheets (dense BF16 Tensor Core TFLOPS, SXM; NVLink
  bandwidth per GPU, both directions together: A100 600 GB/s, H100/H200 900 GB/s, B200 1.8 TB/s).
- [pcie] L4 and L40S have no NVLink: GPU-to-GPU traffic inside a node crosses PCIe Gen4 x16
  (32 GB/s each way; NVIDIA L4/L40S datasheets list "PCIe Gen4 x16: 64GB/s bidirectional").
- [vllm] vLLM v0.26.0, vllm/platforms/cuda.py: the attention backend chosen when none is set
  (FLASH_ATTN on compute capability 8.x and 9.x, FLASHINFER on 10.x); NIXL's handshake in
  vllm/distributed/kv_transfer/kv_connector/v1/nixl compares the two sides' backends.
  vllm/v1/attention/backends/flash_attn.py: FLASH_ATTN takes an fp8 KV cache only on Hopper
  (capability family 9.0), so the backend also depends on the generation once kv_cache_dtype is
  fp8: elsewhere vLLM moves on to FLASHINFER.
- [g6e] EC2 user guide, "Maximize network bandwidth on accelerated instances with EFA"
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): "G6e instances
  support up to four network cards and can provide up to 400 Gbps of network bandwidth".
- [dlc] AWS Deep Learning Containers, "Multi-Node Ray Serve on EKS"
  (https://aws.github.io/deep-learning-containers/tutorials/inference/ray-serve/ray-serve-multi-node):
  this image's prefill/decode over NIXL's LIBFABRIC backend on EFA, on two g6.8xlarge nodes.
- [hyperpod] aws/sagemaker-hyperpod-cli, INSTANCE_RESOURCES (vCPUs, memory, GPUs and EFA
  interfaces of the ml. variants of G6 and G6e, the same hardware).
- [nvidia-ada] NVIDIA L4 and L40S datasheets: 24 GB / 48 GB GDDR6, dense BF16 tensor TFLOPS
  (the datasheets' figures are with sparsity, twice these).

The per-size network bandwidth and instance-store figures of G6 and G6e are the [specs] and [net]
tables' (read 2026-12; the search index behind this project's checks holds AWS's G6e statement
above but not those tables). `pdctl preflight` compares the EFA interface count with EC2's own
DescribeInstanceTypes before a deploy, so a wrong count is caught in the target account.

G6 and G6e (Ada Lovelace, compute capability 8.9) are the trial shape: one to eight GPUs on PCIe
and 25 to 400 Gbps of EFA where P5 has 3,200 Gbps, so KV moves 8 to 128 times slower. Only the
sizes that support EFA are listed (8xlarge and up). Their interfaces use the classic layout (an
EFA-with-ENA interface on device 0 of every card) as AWS's EKS blueprint for g6e does; EFA-only
support for these families is not in the sources above.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInstance:
    name: str
    gpus: int  # [specs]
    gpu_model: str  # [specs]
    gpu_architecture: str  # NVIDIA generation: vLLM's kernels and backends follow it [vllm]
    gpu_memory_gib: int  # per GPU [specs]
    network_cards: int  # = maximum EFA interfaces, one per card [net][efa]
    efa_bandwidth_gbps: int  # [net]
    efa_only_interfaces: bool  # EFA-only interface type supported [efa]
    nvme_disks: int  # local NVMe instance-store volumes [specs]
    nvme_disk_gb: int  # size of each [specs]
    efa_peer_group: str  # instances that can exchange EFA traffic with each other [efa]
    vcpus: int  # [specs]
    memory_gib: int  # [specs]
    gpu_bf16_tflops: int  # dense BF16 tensor throughput per GPU [nvidia]
    vllm_attention_backend: str  # vLLM 0.26's default for this GPU generation [vllm]
    # GB/s one GPU can send to the others of its node (one direction: half the datasheet's
    # bidirectional NVLink figure) [nvidia][pcie]: NCCL's path inside a node.
    gpu_link_gbytes_per_s: int = 0

    @property
    def gpu_link(self) -> str:
        """What joins the GPUs of one node: NVLink, or PCIe on L4 and L40S [pcie]."""
        return "PCIe" if self.gpu_model in ("L4", "L40S") else "NVLink"

    @property
    def has_local_nvme(self) -> bool:
        return self.nvme_disks > 0

    @property
    def accelerator_label_value(self) -> str:
        """The Cluster Autoscaler's GPU type label value, in its AWS spelling (nvidia-<model>,
        lower case). Only the label's presence decides GPU readiness; the value names the type
        in CA's --gpu-total limits."""
        return f"nvidia-{self.gpu_model.lower()}"


# "P4d and P4de instances can communicate over EFA only with other P4d/P4de instances of the same
# type" is how the EFA user guide's limitations put it: each p4 type is its own peer group.
def _p4(name: str, gpu_memory_gib: int, peer_group: str) -> GpuInstance:
    return GpuInstance(
        name=name, gpus=8, gpu_model="A100", gpu_architecture="Ampere",
        gpu_memory_gib=gpu_memory_gib, network_cards=4,
        efa_bandwidth_gbps=400, efa_only_interfaces=True,
        nvme_disks=8, nvme_disk_gb=1000, efa_peer_group=peer_group, vcpus=96, memory_gib=1152,
        gpu_bf16_tflops=312, vllm_attention_backend="FLASH_ATTN", gpu_link_gbytes_per_s=300,
    )  # fmt: skip


def _p5_class(
    name: str, gpu: str, gpu_memory_gib: int, network_cards: int, tflops: int, attention: str
) -> GpuInstance:
    return GpuInstance(
        name=name, gpus=8, gpu_model=gpu, gpu_memory_gib=gpu_memory_gib,
        gpu_architecture="Blackwell" if gpu == "B200" else "Hopper",
        network_cards=network_cards, efa_bandwidth_gbps=3200, efa_only_interfaces=True,
        nvme_disks=8, nvme_disk_gb=3800, efa_peer_group="p5+",
        vcpus=192, memory_gib=2048, gpu_bf16_tflops=tflops, vllm_attention_backend=attention,
        gpu_link_gbytes_per_s=900 if gpu == "B200" else 450,
    )  # fmt: skip


HOPPER = "FLASH_ATTN"
BLACKWELL = "FLASHINFER"
ADA = "FLASH_ATTN"  # compute capability 8.9: FLASH_ATTN supports >= 8.0 and comes first [vllm]


def _g6_class(
    name: str,
    gpus: int,
    vcpus: int,
    memory_gib: int,
    efa_gbps: int,
    network_cards: int,
    nvme_disks: int,
    nvme_disk_gb: int,
) -> GpuInstance:
    """G6 (L4, 24 GB) and G6e (L40S, 48 GB): [hyperpod] for GPUs, vCPUs, memory and EFA
    interfaces; [g6e] for G6e's cards and bandwidth; [specs][net] for the rest."""
    l40s = name.startswith("g6e.")
    return GpuInstance(
        name=name, gpus=gpus, gpu_model="L40S" if l40s else "L4", gpu_architecture="Ada",
        gpu_memory_gib=48 if l40s else 24, network_cards=network_cards,
        efa_bandwidth_gbps=efa_gbps, efa_only_interfaces=False, nvme_disks=nvme_disks,
        nvme_disk_gb=nvme_disk_gb, efa_peer_group="p5+", vcpus=vcpus, memory_gib=memory_gib,
        gpu_bf16_tflops=362 if l40s else 121, vllm_attention_backend=ADA,
        gpu_link_gbytes_per_s=32,
    )  # fmt: skip


CATALOG: dict[str, GpuInstance] = {
    instance.name: instance
    for instance in (
        _p4("p4d.24xlarge", gpu_memory_gib=40, peer_group="p4d"),
        _p4("p4de.24xlarge", gpu_memory_gib=80, peer_group="p4de"),
        _p5_class("p5.48xlarge", "H100", 80, network_cards=32, tflops=989, attention=HOPPER),
        _p5_class("p5e.48xlarge", "H200", 141, network_cards=32, tflops=989, attention=HOPPER),
        _p5_class("p5en.48xlarge", "H200", 141, network_cards=16, tflops=989, attention=HOPPER),
        _p5_class(
            "p6-b200.48xlarge", "B200", 179, network_cards=8, tflops=2250, attention=BLACKWELL
        ),
        # name, GPUs, vCPUs, memory GiB, EFA Gbps, network cards, NVMe disks x GB
        _g6_class("g6.8xlarge", 1, 32, 128, 25, 1, 2, 450),
        _g6_class("g6.12xlarge", 4, 48, 192, 40, 1, 4, 940),
        _g6_class("g6.16xlarge", 1, 64, 256, 25, 1, 2, 940),
        _g6_class("g6.24xlarge", 4, 96, 384, 50, 1, 4, 940),
        _g6_class("g6.48xlarge", 8, 192, 768, 100, 1, 8, 940),
        _g6_class("g6e.8xlarge", 1, 32, 256, 25, 1, 1, 900),
        _g6_class("g6e.12xlarge", 4, 48, 384, 100, 1, 2, 1900),
        _g6_class("g6e.16xlarge", 1, 64, 512, 35, 1, 1, 1900),
        _g6_class("g6e.24xlarge", 4, 96, 768, 200, 2, 2, 1900),
        _g6_class("g6e.48xlarge", 8, 192, 1536, 400, 4, 4, 1900),
    )
}


# The catalog's types that Capacity Blocks for ML are sold for (EC2 user guide, "Capacity Blocks
# for ML", Supported instance types and Regions; AWS PCS user guide, "Using Amazon EC2 Capacity
# Blocks for ML with AWS PCS": P6-B200, P5en, P5e, P5 and P4d). No Capacity Block holds p4de,
# G6 or G6e instances, so a capacity_block group of those could launch nothing.
CAPACITY_BLOCK_TYPES = frozenset(
    {"p4d.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"}
)


def is_p_class(instance: GpuInstance) -> bool:
    """P4d to P6: On-Demand capacity of these is rarely free; AWS sells it through On-Demand
    Capacity Reservations and Capacity Blocks for ML (EC2 user guide, "Capacity Blocks for
    ML")."""
    return instance.name.startswith("p")
