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
- [nvidia] NVIDIA A100, H100/H200 and B200 datasheets (dense BF16 Tensor Core TFLOPS, SXM).
- [vllm] vLLM v0.26.0, vllm/platforms/cuda.py: the attention backend chosen when none is set
  (FLASH_ATTN on compute capability 8.x and 9.x, FLASHINFER on 10.x); NIXL's handshake in
  vllm/distributed/kv_transfer/kv_connector/v1/nixl compares the two sides' backends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInstance:
    name: str
    gpus: int  # [specs]
    gpu_model: str  # [specs]
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
        name=name, gpus=8, gpu_model="A100", gpu_memory_gib=gpu_memory_gib, network_cards=4,
        efa_bandwidth_gbps=400, efa_only_interfaces=True,
        nvme_disks=8, nvme_disk_gb=1000, efa_peer_group=peer_group, vcpus=96, memory_gib=1152,
        gpu_bf16_tflops=312, vllm_attention_backend="FLASH_ATTN",
    )  # fmt: skip


def _p5_class(
    name: str, gpu: str, gpu_memory_gib: int, network_cards: int, tflops: int, attention: str
) -> GpuInstance:
    return GpuInstance(
        name=name, gpus=8, gpu_model=gpu, gpu_memory_gib=gpu_memory_gib,
        network_cards=network_cards, efa_bandwidth_gbps=3200, efa_only_interfaces=True,
        nvme_disks=8, nvme_disk_gb=3800, efa_peer_group="p5+",
        vcpus=192, memory_gib=2048, gpu_bf16_tflops=tflops, vllm_attention_backend=attention,
    )  # fmt: skip


HOPPER = "FLASH_ATTN"
BLACKWELL = "FLASHINFER"

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
    )
}
