"""The GPU instance catalog and the EFA interface layout derived from it (no CDK needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from catalog.efa_layout import EFA_ONLY, ENA, efa_interface_layout
from catalog.instances import CATALOG, GpuInstance, is_p_class

INSTANCES = list(CATALOG.values())
REQUIRED_TYPES = {
    "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
    "p6-b200.48xlarge",
}  # fmt: skip


def test_catalog_covers_the_supported_types() -> None:
    assert CATALOG.keys() >= REQUIRED_TYPES


P_CLASS = [i for i in INSTANCES if is_p_class(i)]
G_CLASS = [i for i in INSTANCES if not is_p_class(i)]


@pytest.mark.parametrize("instance", P_CLASS, ids=lambda i: i.name)
def test_p_class_facts_are_plausible(instance: GpuInstance) -> None:
    assert instance.gpus == 8
    assert instance.network_cards >= 4
    assert instance.efa_bandwidth_gbps % instance.network_cards == 0  # bandwidth splits per card
    assert instance.nvme_disks > 0


@pytest.mark.parametrize("instance", G_CLASS, ids=lambda i: i.name)
def test_the_trial_shapes_are_ada_gpus_with_efa_and_local_nvme(instance: GpuInstance) -> None:
    """G6 (L4, 24 GB) and G6e (L40S, 48 GB), only the sizes with EFA (8xlarge and up): a vCPU
    count of a multiple of 16, one to eight GPUs, and no more EFA bandwidth than the smallest P
    type (p4d)."""
    family, size = instance.name.split(".")
    assert family in ("g6", "g6e")
    assert int(size.removesuffix("xlarge")) >= 8
    assert instance.vcpus % 16 == 0
    assert instance.gpus in (1, 4, 8)
    assert (instance.gpu_model, instance.gpu_memory_gib) == (
        ("L40S", 48) if family == "g6e" else ("L4", 24)
    )
    assert instance.gpu_architecture == "Ada"
    assert instance.vllm_attention_backend == "FLASH_ATTN"  # capability 8.9 >= FLASH_ATTN's 8.0
    assert instance.efa_bandwidth_gbps <= min(p.efa_bandwidth_gbps for p in P_CLASS)
    assert instance.efa_bandwidth_gbps % instance.network_cards == 0
    assert instance.has_local_nvme


def test_g6e_offers_up_to_four_network_cards_and_400_gbps() -> None:
    """EC2 user guide: "G6e instances support up to four network cards and can provide up to
    400 Gbps of network bandwidth"."""
    g6e = [i for i in G_CLASS if i.name.startswith("g6e.")]
    assert max(i.network_cards for i in g6e) == 4
    assert max(i.efa_bandwidth_gbps for i in g6e) == 400


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


@pytest.mark.parametrize(
    "instance", [i for i in INSTANCES if i.efa_only_interfaces], ids=lambda i: i.name
)
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
