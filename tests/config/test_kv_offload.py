"""The KV offload tier (serving.<side>.kv_offload_gib_per_gpu): prefill only, bounded by the node's
allocatable memory beside the pods already there, and vLLM's own offloading options refused with
this setting named. Rules: app_config/rules/kv_transfer.py (kv-offload-decode), app_config/rules/
node_fit.py (kv-offload-fit), app_config/rules/engine_options.py (engine-option-pd)."""

from __future__ import annotations

import json

import pytest

from app_config import engine_options as options
from app_config.rules import engine_options as engine_option_rules
from app_config.rules import evaluate
from app_config.rules import node_fit as rule
from catalog.node_allocatable import node_allocatable
from tests.configurations import load_problems, settings_for

PREFILL = "serving.prefill.kv_offload_gib_per_gpu"
DECODE = "serving.decode.kv_offload_gib_per_gpu"
SETTING_TO_USE = PREFILL


def _room_gib_per_gpu(configuration: str, role: str = "prefill") -> int:
    """What the node leaves for the tier, computed here from the catalog and the rendered pods
    without it: allocatable memory less the worker pod and the GPU DaemonSets, per GPU."""
    settings = settings_for(configuration, **{f"serving.{role}.kv_offload_gib_per_gpu": "0"})
    side = settings.side(role)
    worker = rule.rendered_pods(settings).workers[role]
    node = node_allocatable(side.nodes.instance_type, hugepages_mib=worker.hugepages_mib)
    daemons = rule.daemon_sets(settings, side.nodes.instance_type, gpu=True)
    taken = worker.memory_mib + sum(pod.memory_mib * pod.replicas for pod in daemons)
    return (node.memory_mib - taken) // (1024 * side.gpus_per_node)


# (configuration, overrides, code, setting named, a fragment of the message)
REFUSED = [
    ("default", {DECODE: "16"}, "kv-offload-decode", DECODE, "written and never read"),
    ("default", {PREFILL: "-1"}, "value", PREFILL, "greater than or equal to 0"),
    ("default", {PREFILL: "2048"}, "value", PREFILL, "less than or equal to 1024"),
    ("default", {PREFILL: "sixteen"}, "value", PREFILL, "valid integer"),
    ("default", {PREFILL: "1000"}, "kv-offload-fit", PREFILL, "would stay Pending"),
    ("trial-g6e", {PREFILL: "1000"}, "kv-offload-fit", PREFILL, "g6e.12xlarge"),
    # vLLM's own offloading options replace NIXL (VllmConfig._post_init_kv_transfer_config).
    (
        "default",
        {"serving.prefill.engine_options": '{"kv_offloading_size": 16}'},
        "engine-option-pd",
        "serving.prefill.engine_options.kv_offloading_size",
        f"Use {SETTING_TO_USE}",
    ),
    (
        "default",
        {"serving.engine_options": '{"kv_offloading_backend": "native"}'},
        "engine-option-pd",
        "serving.engine_options.kv_offloading_backend",
        f"Use {SETTING_TO_USE}",
    ),
]


@pytest.mark.parametrize(("configuration", "overrides", "code", "path", "words"), REFUSED)
def test_a_tier_that_cannot_work_is_refused_at_its_setting(
    configuration: str, overrides: dict[str, str], code: str, path: str, words: str
) -> None:
    found = load_problems(configuration, **overrides)
    matching = [(c, p, m) for c, p, m in found if p == path and words in m]
    assert matching, found
    if code != "value":  # a pydantic error has no rule code
        assert {c for c, _, _ in matching} == {code}, matching


@pytest.mark.parametrize(
    "configuration", ["default", "quickstart", "trial-g6e", "reserved-capacity"]
)
def test_the_largest_tier_accepted_is_the_room_the_node_leaves(configuration: str) -> None:
    room = _room_gib_per_gpu(configuration)
    assert room > 0, room
    assert load_problems(configuration, **{PREFILL: str(room)}) == []
    refused = load_problems(configuration, **{PREFILL: str(room + 1)})
    assert [(c, p) for c, p, _ in refused] == [("kv-offload-fit", PREFILL)], refused
    assert f"use at most {room} GiB per GPU" in refused[0][2]


def test_a_tier_too_large_is_one_finding_not_also_a_node_misfit() -> None:
    found = load_problems("default", **{PREFILL: "1000"})
    assert [c for c, _, _ in found] == ["kv-offload-fit"], found


def test_a_tier_within_nominal_memory_but_past_the_kernels_share_warns_at_the_node() -> None:
    """The tier counts in the worker pod's requests the headroom warning reads: a tier that fits
    the nominal allocatable may not fit what the node reports (node-fit-headroom)."""
    settings = settings_for("default", **{PREFILL: str(_room_gib_per_gpu("default"))})
    codes = {(f.code, f.path) for f in evaluate(settings)}
    assert ("node-fit-headroom", "gpu_nodes.prefill.instance_type") in codes


def test_off_by_default_and_a_small_tier_loads_cleanly() -> None:
    settings = settings_for("default")
    assert settings.serving.prefill.kv_offload_gib_per_gpu == 0
    assert settings.serving.decode.kv_offload_gib_per_gpu == 0
    assert load_problems("default", **{PREFILL: "8"}) == []


def test_every_option_that_replaces_the_connector_is_refused_naming_the_setting() -> None:
    """The CacheConfig fields vLLM 0.26's VllmConfig._post_init_kv_transfer_config reads
    (engine_options.CONNECTOR_REPLACING; tests/e2e/test_kv_offload.py reads the method's source
    for the list) are each refused, with the setting to use."""
    assert set(options.CONNECTOR_REPLACING) <= set(engine_option_rules.BREAKS_KV_TRANSFER)
    samples = {"kv_offloading_size": 8, "kv_offloading_backend": "lmcache"}
    assert set(samples) == set(options.CONNECTOR_REPLACING)
    for key, value in samples.items():
        found = load_problems(
            "default", **{"serving.decode.engine_options": json.dumps({key: value})}
        )
        assert [(c, p) for c, p, _ in found] == [
            ("engine-option-pd", f"serving.decode.engine_options.{key}")
        ], found
        assert SETTING_TO_USE in found[0][2]
