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
