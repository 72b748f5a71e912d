"""What the kubelet of an EKS node offers pods (its allocatable), by the rules of the AMI the app
runs on every node group: the EKS-optimized Amazon Linux 2023 AMIs (AL2023_x86_64_STANDARD on
the system nodes, AL2023_x86_64_NVIDIA on the GPU nodes), whose nodeadm writes the kubelet's
configuration at boot. The node-fit rule (app_config/rules/node_fit.py) compares it with the
requests of what the app places on each node.

Sources:
- [nodeadm] awslabs/amazon-eks-ami at v20260724 (commit 81fec2e8),
  nodeadm/internal/kubelet/config.go: ``withDefaultReservedResources`` sets kubeReserved
  cpu = ``getCPUMillicoresToReserve`` (6 % of the first core, 1 % of the second, 0.5 % of the
  next two, 0.25 % of every core above four), memory = ``getMemoryMebibytesToReserve``
  (11 MiB x maxPods + 255 MiB); ``defaultKubeletSubConfig`` sets evictionHard
  memory.available 100Mi; no systemReserved. eni_max_pods.go ``calculateStandardMaxPods``:
  maxPods = ENIs of the default network card x (IPv4 addresses per ENI - 1) + 2, the figures
  from the embedded instance-info.jsonl (ENI_LIMITS below copies the rows this app can use).
- [eks-maxpods] EKS user guide, "Choose an optimal Amazon EC2 node instance type", "How maxPods
  is determined" (awsdocs/amazon-eks-user-guide, commit 3a23761): a managed node group without
  a custom AMI caps maxPods in the node's user data at 110 below 30 vCPUs and 250 otherwise.
  The app renders no maxPods and no prefix delegation, so the ENI formula under that cap holds.
- [kubelet] Kubernetes 1.35, pkg/kubelet/nodestatus/setters.go ``MachineInfo``: allocatable =
  capacity - kubeReserved - systemReserved - evictionHard, and the node's pre-allocated huge
  pages are taken out of allocatable memory.
- [karpenter] aws/karpenter-provider-aws pkg/operator/options/options.go: the memory the guest
  kernel reports (the node's capacity) is below the instance's nominal memory; Karpenter assumes
  7.5 % (``VM_MEMORY_OVERHEAD_PERCENT``, default 0.075) until a node has reported its real
  capacity. Used here the same way: an estimate, for a warning, never for an error.
- [ec2] EC2 user guide, "Amazon EC2 instance type specifications" (general purpose, compute and
  memory optimized): in the m, c and r families of generations 5 to 8 a size has the same vCPUs
  in every family (large 2, xlarge 4, ... 48xlarge 192) and 4, 2 and 8 GiB per vCPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from catalog.instances import CATALOG

# Default network card ENIs and IPv4 addresses per ENI [nodeadm instance-info.jsonl].
ENI_LIMITS: dict[str, tuple[int, int]] = {
    "p4d.24xlarge": (15, 50),
    "p4de.24xlarge": (15, 50),
    "p5.48xlarge": (2, 50),
    "p5e.48xlarge": (2, 50),
    "p5en.48xlarge": (4, 50),
    "p6-b200.48xlarge": (4, 50),
    "g6.8xlarge": (8, 30),
    "g6.12xlarge": (8, 30),
    "g6.16xlarge": (15, 50),
    "g6.24xlarge": (15, 50),
    "g6.48xlarge": (15, 50),
    "g6e.8xlarge": (8, 30),
    "g6e.12xlarge": (10, 30),
    "g6e.16xlarge": (15, 50),
    "g6e.24xlarge": (10, 50),
    "g6e.48xlarge": (10, 50),
    # system node families (x86_64)
    "m5.large": (3, 10),
    "m5.xlarge": (4, 15),
    "m5.2xlarge": (4, 15),
    "m5.4xlarge": (8, 30),
    "m5.8xlarge": (8, 30),
    "m5.12xlarge": (8, 30),
    "m5.16xlarge": (15, 50),
    "m5.24xlarge": (15, 50),
    "m6i.large": (3, 10),
    "m6i.xlarge": (4, 15),
    "m6i.2xlarge": (4, 15),
    "m6i.4xlarge": (8, 30),
    "m6i.8xlarge": (8, 30),
    "m6i.12xlarge": (8, 30),
    "m6i.16xlarge": (15, 50),
    "m6i.24xlarge": (15, 50),
    "m6i.32xlarge": (15, 50),
    "m6a.large": (3, 10),
    "m6a.xlarge": (4, 15),
    "m6a.2xlarge": (4, 15),
    "m6a.4xlarge": (8, 30),
    "m6a.8xlarge": (8, 30),
    "m6a.12xlarge": (8, 30),
    "m6a.16xlarge": (15, 50),
    "m6a.24xlarge": (15, 50),
    "m6a.32xlarge": (15, 50),
    "m6a.48xlarge": (15, 50),
    "m7i.large": (3, 10),
    "m7i.xlarge": (4, 15),
    "m7i.2xlarge": (4, 15),
    "m7i.4xlarge": (8, 30),
    "m7i.8xlarge": (8, 30),
    "m7i.12xlarge": (8, 30),
    "m7i.16xlarge": (15, 50),
    "m7i.24xlarge": (15, 50),
    "m7i.48xlarge": (15, 50),
    "m7a.large": (3, 10),
    "m7a.xlarge": (4, 15),
    "m7a.2xlarge": (4, 15),
    "m7a.4xlarge": (8, 30),
    "m7a.8xlarge": (8, 30),
    "m7a.12xlarge": (8, 30),
    "m7a.16xlarge": (15, 50),
    "m7a.24xlarge": (15, 50),
    "m7a.32xlarge": (15, 50),
    "m7a.48xlarge": (15, 50),
    "m8i.large": (3, 20),
    "m8i.xlarge": (4, 30),
    "m8i.2xlarge": (4, 30),
    "m8i.4xlarge": (8, 50),
    "m8i.8xlarge": (10, 50),
    "m8i.12xlarge": (12, 50),
    "m8i.16xlarge": (16, 64),
    "m8i.24xlarge": (16, 64),
    "m8i.32xlarge": (24, 64),
    "m8i.48xlarge": (24, 64),
    "c6i.large": (3, 10),
    "c6i.xlarge": (4, 15),
    "c6i.2xlarge": (4, 15),
    "c6i.4xlarge": (8, 30),
    "c6i.8xlarge": (8, 30),
    "c6i.12xlarge": (8, 30),
    "c6i.16xlarge": (15, 50),
    "c6i.24xlarge": (15, 50),
    "c6i.32xlarge": (15, 50),
    "c7i.large": (3, 10),
    "c7i.xlarge": (4, 15),
    "c7i.2xlarge": (4, 15),
    "c7i.4xlarge": (8, 30),
    "c7i.8xlarge": (8, 30),
    "c7i.12xlarge": (8, 30),
    "c7i.16xlarge": (15, 50),
    "c7i.24xlarge": (15, 50),
    "c7i.48xlarge": (15, 50),
    "r6i.large": (3, 10),
    "r6i.xlarge": (4, 15),
    "r6i.2xlarge": (4, 15),
    "r6i.4xlarge": (8, 30),
    "r6i.8xlarge": (8, 30),
    "r6i.12xlarge": (8, 30),
    "r6i.16xlarge": (15, 50),
    "r6i.24xlarge": (15, 50),
    "r6i.32xlarge": (15, 50),
    "r7i.large": (3, 10),
    "r7i.xlarge": (4, 15),
    "r7i.2xlarge": (4, 15),
    "r7i.4xlarge": (8, 30),
    "r7i.8xlarge": (8, 30),
    "r7i.12xlarge": (8, 30),
    "r7i.16xlarge": (15, 50),
    "r7i.24xlarge": (15, 50),
    "r7i.48xlarge": (15, 50),
}

# [ec2]: vCPUs of a size, GiB of memory per vCPU of a family.
_SIZE_VCPUS = {
    "large": 2, "xlarge": 4, "2xlarge": 8, "4xlarge": 16, "8xlarge": 32, "12xlarge": 48,
    "16xlarge": 64, "24xlarge": 96, "32xlarge": 128, "48xlarge": 192,
}  # fmt: skip
_GIB_PER_VCPU = {"m": 4, "c": 2, "r": 8}
_SYSTEM_FAMILY = re.compile(r"(?P<kind>[mcr])[5-8][ai]?")

MAX_PODS_CAP_SMALL, MAX_PODS_CAP_LARGE, CAP_VCPUS = 110, 250, 30  # [eks-maxpods]
EVICTION_HARD_MEMORY_MIB = 100  # [nodeadm] evictionHard memory.available
VM_MEMORY_OVERHEAD = 0.075  # [karpenter]


@dataclass(frozen=True)
class Allocatable:
    """What the scheduler may place on one node. Memory is given twice: from the instance's
    nominal memory (an upper bound: what does not fit it never fits) and from the memory the
    kernel is expected to report (an estimate: what does not fit it may not)."""

    instance_type: str
    vcpus: int
    memory_gib: int  # nominal
    max_pods: int
    cpu_millis: int
    memory_mib: int  # from the nominal memory
    memory_mib_estimated: int  # from the memory the kernel is expected to report
    kube_reserved_cpu_millis: int
    kube_reserved_memory_mib: int


def _shape(instance_type: str) -> tuple[int, int] | None:
    """vCPUs and nominal GiB: the GPU catalog's, else the m/c/r size rule [ec2]."""
    if instance_type in CATALOG:
        instance = CATALOG[instance_type]
        return instance.vcpus, instance.memory_gib
    family, _, size = instance_type.partition(".")
    match = _SYSTEM_FAMILY.fullmatch(family)
    if not match or size not in _SIZE_VCPUS:
        return None
    vcpus = _SIZE_VCPUS[size]
    return vcpus, vcpus * _GIB_PER_VCPU[match["kind"]]


def _reserved_cpu_millis(vcpus: int) -> int:
    """[nodeadm] getCPUMillicoresToReserve: per range of millicores, a share in 1/10000."""
    total = vcpus * 1000
    bounds, shares = (0, 1000, 2000, 4000, total), (600, 100, 50, 25)
    return sum(
        (min(total, bounds[i + 1]) - bounds[i]) * shares[i] // 10000
        for i in range(4)
        if total > bounds[i]
    )


def node_allocatable(instance_type: str, hugepages_mib: int = 0) -> Allocatable | None:
    """The allocatable CPU, memory and pods of one node of ``instance_type`` on the AL2023 EKS
    AMI in a managed node group, with ``hugepages_mib`` of huge pages pre-allocated on it; None
    for a type whose ENI limits or size this catalog does not hold."""
    shape = _shape(instance_type)
    if shape is None or instance_type not in ENI_LIMITS:
        return None
    vcpus, memory_gib = shape
    enis, addresses = ENI_LIMITS[instance_type]
    cap = MAX_PODS_CAP_SMALL if vcpus < CAP_VCPUS else MAX_PODS_CAP_LARGE
    max_pods = min(enis * (addresses - 1) + 2, cap)
    reserved_cpu = _reserved_cpu_millis(vcpus)
    reserved_memory = 11 * max_pods + 255
    held_back = reserved_memory + EVICTION_HARD_MEMORY_MIB + hugepages_mib
    nominal_mib = memory_gib * 1024
    return Allocatable(
        instance_type=instance_type,
        vcpus=vcpus,
        memory_gib=memory_gib,
        max_pods=max_pods,
        cpu_millis=vcpus * 1000 - reserved_cpu,
        memory_mib=nominal_mib - held_back,
        memory_mib_estimated=int(nominal_mib * (1 - VM_MEMORY_OVERHEAD)) - held_back,
        kube_reserved_cpu_millis=reserved_cpu,
        kube_reserved_memory_mib=reserved_memory,
    )
