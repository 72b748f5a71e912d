"""Where each network interface of a multi-card EFA instance goes, per current AWS guidance.

EC2 user guide, "Maximize network bandwidth on Amazon EC2 instances with multiple network cards"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html), and the EKS user
guide's managed-node-group launch template for EFA ("Manage EFA devices on Amazon EKS"):

- network card 0, device 0: an ENA interface (the primary; it cannot be EFA-only);
- network card 0, device 1: an EFA-only interface;
- every other network card, device 0: an EFA-only interface.

EFA-only interfaces take no IP address, so a 32-card p5 costs one subnet address, not 33. Where
EFA-only is unavailable, the older layout applies: an EFA (EFA with ENA) interface as the primary
and on device 0 of every other card.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from catalog.instances import GpuInstance

ENA = "interface"
EFA = "efa"
EFA_ONLY = "efa-only"


@dataclass(frozen=True)
class InterfaceSlot:
    network_card_index: int
    device_index: int
    interface_type: str

    @property
    def carries_efa(self) -> bool:
        return self.interface_type in (EFA, EFA_ONLY)


def efa_interface_layout(instance: GpuInstance) -> list[InterfaceSlot]:
    if not instance.efa_only_interfaces:
        return [InterfaceSlot(card, 0, EFA) for card in range(instance.network_cards)]
    return [
        InterfaceSlot(0, 0, ENA),
        InterfaceSlot(0, 1, EFA_ONLY),
        *(InterfaceSlot(card, 0, EFA_ONLY) for card in range(1, instance.network_cards)),
    ]


def efa_devices(instance: GpuInstance) -> int:
    """EFA devices a node's pod is given: one per interface that carries EFA in the layout."""
    return sum(slot.carries_efa for slot in efa_interface_layout(instance))


def efa_devices_per_gpu(instance: GpuInstance) -> Fraction:
    """EFA devices one GPU's memory is moved over, as NIXL 1.3.1's LIBFABRIC backend pairs them.

    ai-dynamo/nixl v1.3.1 src/utils/libfabric/libfabric_topology.cpp
    `nixlLibfabricTopology::groupNicsWithAccel`: the NICs under the PCIe ancestor they share with
    GPUs are split evenly among those GPUs ("Split NICs among accelerators"; the first groups take
    the remainder), and where an ancestor has fewer NICs than GPUs every GPU there is given all of
    them ("sharing all NICs with each accelerator"). libfabric_rail_manager.cpp
    `selectRailsForMemory`: a VRAM registration uses only its GPU's group
    (`getEfaDevicesForPci`). So a GPU gets devices // GPUs devices of its own (p5: 4, p5en: 2,
    p6-b200: 1) or, on fewer devices than GPUs (p4d, multi-GPU g6/g6e), a share of the ones its
    neighbours use too: devices / GPUs when every GPU transfers at once, as DP ranks do. The
    even split over the whole node stands for NIXL's per-ancestor split (AWS's P-class nodes put
    the same number of GPUs and EFA devices under each PCIe switch: NIXL's topology tests,
    test/unit/utils/libfabric/topo/*.xml)."""
    devices, gpus = efa_devices(instance), instance.gpus
    return Fraction(devices // gpus) if devices >= gpus else Fraction(devices, gpus)


def efa_gbps_per_gpu(instance: GpuInstance) -> float:
    """The EFA bandwidth one GPU's KV transfer (and its NCCL traffic) can use: its devices'
    share of the node's bandwidth (each device carries bandwidth / devices: p5 32 x 100 Gbps,
    p5en 16 x 200, p6-b200 8 x 400), about 400 Gbps on p5/p5en/p6-b200 where the node has 3,200."""
    per_device = instance.efa_bandwidth_gbps / efa_devices(instance)
    return float(efa_devices_per_gpu(instance) * Fraction(per_device))
