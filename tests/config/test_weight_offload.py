"""vLLM's weight offload (the engine option cpu_offload_gb: GiB per GPU held in pinned host
memory, vLLM 0.26 config/offload.py UVAOffloadConfig) is counted in the worker pod's memory
request like the KV offload tier, and an offload the node cannot hold is refused at the option.
Rule: app_config/rules/node_fit.py (weight-offload-fit); renderer:
serving_manifests/rayservice.py."""

from __future__ import annotations

import json
import math

import pytest

from app_config.rules import node_fit as rule
from catalog.node_allocatable import node_allocatable
from tests.configurations import load_problems, settings_for

DECODE_OPTIONS = "serving.decode.engine_options"
BOTH_OPTIONS = "serving.engine_options"


def _offload(gib: float, where: str = DECODE_OPTIONS) -> dict[str, str]:
    return {where: json.dumps({"cpu_offload_gb": gib})}


def _room_gib(configuration: str, role: str) -> tuple[int, int]:
    """What the node leaves, computed here from the catalog and the rendered pod without any
    offload: allocatable memory less the worker pod and the GPU DaemonSets, in whole GiB (the
    pod's request grows in whole GiB); and the side's GPUs of the node."""
    settings = settings_for(configuration)
    side = settings.side(role)
    worker = rule.rendered_pods(settings).workers[side.group]
    node = node_allocatable(side.nodes.instance_type, hugepages_mib=worker.hugepages_mib)
    daemons = rule.daemon_sets(settings, side.nodes.instance_type, gpu=True)
    taken = worker.memory_mib + sum(pod.memory_mib * pod.replicas for pod in daemons)
    return (node.memory_mib - taken) // 1024, side.gpus_per_node


def _tenths(gib: float) -> float:
    return math.floor(gib * 10) / 10


def _largest_gib_per_gpu(configuration: str, role: str) -> float:
    room, gpus = _room_gib(configuration, role)
    return _tenths(room / gpus)


def test_the_offload_is_added_to_the_worker_pods_memory_request() -> None:
    plain = rule.rendered_pods(settings_for("default")).workers["decode"].memory_mib
    offloaded = settings_for("default", **_offload(8))
    gpus = offloaded.side("decode").gpus_per_node
    assert rule.rendered_pods(offloaded).workers["decode"].memory_mib == plain + 8 * gpus * 1024
    assert rule.rendered_pods(offloaded).workers["prefill"].memory_mib == (
        rule.rendered_pods(settings_for("default")).workers["prefill"].memory_mib
    )


@pytest.mark.parametrize(
    ("options", "counted_gib"),
    [
        ({"cpu_offload_gb": 4, "offload_backend": "uva"}, 4),
        ({"cpu_offload_gb": 4, "offload_backend": "uva", "offload_group_size": 8}, 4),
        # vLLM builds the layer-group offloader and ignores the UVA size
        # (model_executor/offloader/base.py create_offloader).
        ({"cpu_offload_gb": 4, "offload_group_size": 8}, 0),
        ({"cpu_offload_gb": 4, "offload_backend": "prefetch", "offload_group_size": 8}, 0),
    ],
)
def test_only_the_offloader_vllm_builds_is_counted(options: dict, counted_gib: int) -> None:
    plain = rule.rendered_pods(settings_for("default")).workers["decode"].memory_mib
    settings = settings_for("default", **{DECODE_OPTIONS: json.dumps(options)})
    gpus = settings.side("decode").gpus_per_node
    memory = rule.rendered_pods(settings).workers["decode"].memory_mib
    assert memory == plain + counted_gib * gpus * 1024


def test_a_fraction_of_a_gib_rounds_the_request_up_to_whole_gib() -> None:
    plain = rule.rendered_pods(settings_for("default")).workers["decode"].memory_mib
    offloaded = rule.rendered_pods(settings_for("default", **_offload(0.1))).workers["decode"]
    # 0.1 GiB x 8 GPUs = 819.2 MiB of pinned pages: one more GiB on the request.
    assert offloaded.memory_mib - plain == 1024


def test_both_sides_option_counts_on_both_sides() -> None:
    plain = rule.rendered_pods(settings_for("default")).workers
    both = rule.rendered_pods(settings_for("default", **_offload(4, BOTH_OPTIONS))).workers
    for role in ("prefill", "decode"):
        gpus = settings_for("default").side(role).gpus_per_node
        assert both[role].memory_mib == plain[role].memory_mib + 4 * gpus * 1024, role


@pytest.mark.parametrize(
    ("configuration", "role"),
    [("default", "decode"), ("default", "prefill"), ("trial-g6e", "decode")],
)
def test_the_largest_offload_accepted_is_the_room_the_node_leaves(
    configuration: str, role: str
) -> None:
    largest = _largest_gib_per_gpu(configuration, role)
    assert largest > 0, largest
    where = f"serving.{role}.engine_options"
    assert load_problems(configuration, **_offload(largest, where)) == []
    refused = load_problems(configuration, **_offload(round(largest + 0.1, 1), where))
    assert [(c, p) for c, p, _ in refused] == [("weight-offload-fit", f"{where}.cpu_offload_gb")], (
        refused
    )
    assert f"use at most {largest:g} GiB per GPU" in refused[0][2]
    assert "would stay Pending" in refused[0][2]


def test_an_offload_set_for_both_sides_is_named_where_it_was_set() -> None:
    refused = load_problems("default", **_offload(1000, BOTH_OPTIONS))
    assert {(c, p) for c, p, _ in refused} == {
        ("weight-offload-fit", f"{BOTH_OPTIONS}.cpu_offload_gb")
    }, refused


def test_the_offload_and_the_kv_tier_share_the_room() -> None:
    """With the prefill KV tier at about half the room, the largest weight offload is what the
    tier leaves."""
    room, gpus = _room_gib("default", "prefill")
    tier = room // gpus // 2
    left = _tenths(room / gpus - tier)
    with_tier = {"serving.prefill.kv_offload_gib_per_gpu": str(tier)}
    where = "serving.prefill.engine_options"
    assert load_problems("default", **with_tier, **_offload(left, where)) == []
    refused = load_problems("default", **with_tier, **_offload(round(left + 0.1, 1), where))
    assert [c for c, _, _ in refused] == ["weight-offload-fit"], refused
    assert f"use at most {left:g} GiB per GPU" in refused[0][2]
