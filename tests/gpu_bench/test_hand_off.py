"""The one-GPU hand-off direction: push changes only the connector's name, on both sides, says
why, and gives each Ray node a NIXL side channel of its own."""

from __future__ import annotations

import copy

import pytest

from app_config.node_labels import GPU_ROLES
from serving_manifests.serve_config import MULTI_CONNECTOR, render_serve_config
from tests.configurations import settings_for
from tools.gpu_bench import hand_off
from tools.gpu_check.deployed import DeployedRayService
from tools.gpu_check.engines import SIDE_CHANNEL_PORTS


@pytest.fixture(scope="module")
def deployed(default_app) -> dict:
    return DeployedRayService.read(default_app.outdir).serve_config


def _connectors(config: dict) -> dict[str, str]:
    (application,) = config["applications"]
    return {
        role: application["args"][f"{role}_config"]["engine_kwargs"]["kv_transfer_config"][
            "kv_connector"
        ]
        for role in GPU_ROLES
    }


def test_push_renames_both_sides_connector_and_nothing_else(deployed) -> None:
    config = copy.deepcopy(deployed)
    changes = hand_off.choose(config, "push", deployed)
    assert _connectors(config) == dict.fromkeys(GPU_ROLES, hand_off.PUSH_CONNECTOR)
    assert [change.setting.split(".")[0] for change in changes] == [
        f"{role}_config" for role in GPU_ROLES
    ]
    assert all("vllm#52607" in change.reason for change in changes)
    restored = copy.deepcopy(config)
    for side in restored["applications"][0]["args"].values():
        if isinstance(side, dict) and "engine_kwargs" in side:
            side["engine_kwargs"]["kv_transfer_config"]["kv_connector"] = _connectors(deployed)[
                "prefill"
            ]
    assert restored == deployed


def test_pull_is_the_synthesized_config_with_no_change(deployed) -> None:
    config = copy.deepcopy(deployed)
    hand_off.choose(config, "push", deployed)
    assert hand_off.choose(config, "pull", deployed) == []
    assert config == deployed


def test_an_unknown_direction_is_refused_with_the_valid_ones(deployed) -> None:
    with pytest.raises(ValueError, match="push, pull"):
        hand_off.choose(copy.deepcopy(deployed), "sideways", deployed)


def test_push_renames_only_nixl_inside_prefills_offload_multiconnector() -> None:
    settings = settings_for("default", **{"serving.prefill.kv_offload_gib_per_gpu": "4"})
    deployed = render_serve_config(settings)
    config = copy.deepcopy(deployed)
    changes = hand_off.choose(config, "push", deployed)
    (application,) = config["applications"]
    prefill = application["args"]["prefill_config"]["engine_kwargs"]["kv_transfer_config"]
    nixl, tier = prefill["kv_connector_extra_config"]["connectors"]
    assert (prefill["kv_connector"], nixl["kv_connector"]) == (
        MULTI_CONNECTOR,
        hand_off.PUSH_CONNECTOR,
    )
    assert (
        tier
        == deployed["applications"][0]["args"]["prefill_config"]["engine_kwargs"][
            "kv_transfer_config"
        ]["kv_connector_extra_config"]["connectors"][1]
    )
    assert [change.setting for change in changes] == [
        "prefill_config.engine_kwargs.kv_transfer_config.kv_connector_extra_config."
        "connectors[0].kv_connector",
        "decode_config.engine_kwargs.kv_transfer_config.kv_connector",
    ]


def test_each_ray_node_has_its_own_side_channel_clear_of_the_direct_engines() -> None:
    ports = {
        int(hand_off.side_channel_environment(role)["VLLM_NIXL_SIDE_CHANNEL_PORT"])
        for role in GPU_ROLES
    }
    assert len(ports) == len(GPU_ROLES)
    assert not ports & set(SIDE_CHANNEL_PORTS.values())


def test_get_zcopy_turns_on_ucx_cuda_ipc_reads_and_says_why() -> None:
    assert hand_off.transport_environment(True) == {"UCX_CUDA_IPC_ENABLE_GET_ZCOPY": "y"}
    (change,) = hand_off.transport_changes(True)
    assert change.startswith("environment UCX_CUDA_IPC_ENABLE_GET_ZCOPY: unset -> 'y'")
    assert "cuda_ipc_iface.c" in change


def test_without_get_zcopy_the_transport_is_ucx_default() -> None:
    assert hand_off.transport_environment(False) == {}
    assert hand_off.transport_changes(False) == []
