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
- [ray] Ray, python/ray/util/accelerators/accelerators.py and the NVIDIA GPU auto-detection in
  ray/_private/accelerators/nvidia_gpu.py: the node resource is ``accelerator_type:<name>`` with
  the name taken from the GPU's NVML name (A100 for both A100 sizes).
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
    ray_accelerator_type: str  # [ray]
    nvme_disks: int  # local NVMe instance-store volumes [specs]
    nvme_disk_gb: int  # size of each [specs]
    efa_peer_group: str  # instances that can exchange EFA traffic with each other [efa]
    vcpus: int  # [specs]
    memory_gib: int  # [specs]

    @property
    def has_local_nvme(self) -> bool:
        return self.nvme_disks > 0


# "P4d and P4de instances can communicate over EFA only with other P4d/P4de instances of the same
# type" is how the EFA user guide's limitations put it: each p4 type is its own peer group.
# Columns: name, gpus, gpu_model, gpu_memory_gib, network_cards, efa_bandwidth_gbps,
# efa_only_interfaces, ray_accelerator_type, nvme_disks, nvme_disk_gb, efa_peer_group, vcpus,
# memory_gib.
CATALOG: dict[str, GpuInstance] = {
    instance.name: instance
    for instance in (
        GpuInstance("p4d.24xlarge", 8, "A100", 40, 4, 400, True, "A100", 8, 1000, "p4d", 96, 1152),
        GpuInstance(
            "p4de.24xlarge", 8, "A100", 80, 4, 400, True, "A100", 8, 1000, "p4de", 96, 1152
        ),
        GpuInstance(
            "p5.48xlarge", 8, "H100", 80, 32, 3200, True, "H100", 8, 3800, "p5+", 192, 2048
        ),
        GpuInstance(
            "p5e.48xlarge", 8, "H200", 141, 32, 3200, True, "H200", 8, 3800, "p5+", 192, 2048
        ),
        GpuInstance(
            "p5en.48xlarge", 8, "H200", 141, 16, 3200, True, "H200", 8, 3800, "p5+", 192, 2048
        ),
        GpuInstance(
            "p6-b200.48xlarge", 8, "B200", 179, 8, 3200, True, "B200", 8, 3800, "p5+", 192, 2048
        ),
    )
}


def gpu_instance(name: str) -> GpuInstance:
    return CATALOG[name]
