"""The GPU instance catalog and the EFA interface layout derived from it (no CDK needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from catalog.efa_layout import EFA_ONLY, ENA, efa_interface_layout
from catalog.instances import CATALOG, GpuInstance

INSTANCES = list(CATALOG.values())
REQUIRED_TYPES = {
    "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
    "p6-b200.48xlarge",
}  # fmt: skip


def test_catalog_covers_the_supported_types() -> None:
    assert CATALOG.keys() >= REQUIRED_TYPES


@pytest.mark.parametrize("instance", INSTANCES, ids=lambda i: i.name)
def test_facts_are_plausible(instance: GpuInstance) -> None:
    assert instance.gpus == 8
    assert instance.network_cards >= 4
    assert instance.efa_bandwidth_gbps % instance.network_cards == 0  # bandwidth splits per card
    assert instance.nvme_disks > 0


def test_p4_types_are_their_own_efa_peer_groups() -> None:
    groups = {i.name: i.efa_peer_group for i in INSTANCES}
    assert groups["p4d.24xlarge"] != groups["p4de.24xlarge"]
    p5_class = {
        groups[n] for n in ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge")
    }
    assert len(p5_class) == 1
    assert not p5_class & {groups["p4d.24xlarge"], groups["p4de.24xlarge"]}


@pytest.mark.parametrize("instance", INSTANCES, ids=lambda i: i.name)
def test_every_network_card_gets_exactly_one_efa_interface(instance: GpuInstance) -> None:
    layout = efa_interface_layout(instance)
    efa_cards = [slot.network_card_index for slot in layout if slot.carries_efa]
    assert sorted(efa_cards) == list(range(instance.network_cards))


@pytest.mark.parametrize("instance", INSTANCES, ids=lambda i: i.name)
def test_layout_follows_current_aws_guidance(instance: GpuInstance) -> None:
    slots = {
        (s.network_card_index, s.device_index): s.interface_type
        for s in efa_interface_layout(instance)
    }
    assert slots.pop((0, 0)) == ENA  # the primary: never EFA-only
    assert slots.pop((0, 1)) == EFA_ONLY
    assert slots == {(card, 0): EFA_ONLY for card in range(1, instance.network_cards)}


def test_without_efa_only_support_every_card_gets_a_full_efa_interface() -> None:
    legacy = replace(CATALOG["p4d.24xlarge"], efa_only_interfaces=False)
    layout = efa_interface_layout(legacy)
    assert [(s.network_card_index, s.device_index, s.interface_type) for s in layout] == [
        (card, 0, "efa") for card in range(legacy.network_cards)
    ]
