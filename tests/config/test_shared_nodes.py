"""gpu_nodes.shared: both sides on every node of one group, each on its own GPUs of it. The
settings and rules of the shape, as tables (the configuration -> the setting named and a
fragment of the message), on top of examples/trial-one-node.yaml."""

from __future__ import annotations

import pytest

from app_config import ConfigError
from app_config.node_labels import GPU_ROLES, ROLE_LABEL, SHARED_GROUP
from app_config.rules import evaluate, warnings
from catalog.instances import CATALOG
from tests.configurations import refusals, settings_for

BASE = "trial-one-node"

INVALID = [
    # The split fills the node: no idle GPU, none beyond the node's.
    (
        {"gpu_nodes.shared.gpus": '{"prefill": 1, "decode": 2}'},
        "gpu_nodes.shared",
        "must add up to the 4 GPUs of a g6.12xlarge",
    ),
    (
        {"gpu_nodes.shared.instance_type": "p5.48xlarge"},
        "gpu_nodes.shared",
        "must add up to the 8 GPUs of a p5.48xlarge",
    ),
    (
        {
            "gpu_nodes.shared.instance_type": "g6e.8xlarge",
            "gpu_nodes.shared.gpus": '{"prefill": 1, "decode": 1}',
        },
        "gpu_nodes.shared",
        "a one-GPU instance cannot hold both sides",
    ),
    # One layout: a side's own group beside the shared one is refused.
    (
        {"gpu_nodes.decode.instance_type": "g6e.12xlarge"},
        "gpu_nodes",
        "remove gpu_nodes.decode",
    ),
    # A replica fits the side's share of one node.
    (
        {"serving.prefill.tensor_parallel_size": "4"},
        "serving.prefill.tensor_parallel_size",
        "needs more GPUs than the side's share of one g6.12xlarge "
        "(gpu_nodes.shared.gpus.prefill) has (2)",
    ),
    (
        {"serving.decode.tensor_parallel_size": "1", "serving.decode.data_parallel_size": "3"},
        "serving.decode.data_parallel_size",
        "does not divide the side's 2 GPUs of each shared node",
    ),
    # Both sides' replica bounds follow the node group's sizes.
    (
        {"serving.prefill.max_replicas": "1"},
        "serving.prefill.max_replicas",
        "use max_replicas 2",
    ),
    (
        {"gpu_nodes.shared.scaling": '{"min_size": 2, "desired_size": 2, "max_size": 4}'},
        "serving.decode.min_replicas",
        "use min_replicas 2",
    ),
    (
        {
            "serving.decode.tensor_parallel_size": "1",
            "serving.decode.min_replicas": "1",
        },
        "serving.decode.min_replicas",
        "each shared node holds 2 decode replica(s)",
    ),
    # The hand-off inside the node is UCX's.
    (
        {"serving.kv_transfer.backend": "LIBFABRIC"},
        "serving.kv_transfer.backend",
        "use UCX",
    ),
]


@pytest.mark.parametrize(("overrides", "setting", "fragment"), INVALID)
def test_a_bad_shared_shape_is_refused_naming_the_setting(
    overrides: dict[str, str], setting: str, fragment: str
) -> None:
    problems = refusals(BASE, **overrides)
    message = str(ConfigError(problems))  # what the user reads
    assert setting in [problem.path for problem in problems], message
    assert fragment in message


def test_each_side_holds_its_share_of_every_node_and_defaults_its_tp_to_it() -> None:
    settings = settings_for(BASE)
    shared = settings.gpu_nodes.shared
    assert list(settings.gpu_nodes.groups()) == [SHARED_GROUP]
    for role in GPU_ROLES:
        side = settings.side(role)
        share = getattr(shared.gpus, role)
        assert (side.group, side.nodes, side.gpus_per_node) == (SHARED_GROUP, shared, share)
        assert side.tensor_parallel == share  # unset: the side's GPUs of one node
        assert side.nodes_setting == "gpu_nodes.shared"
        assert side.placement.labels[ROLE_LABEL] == SHARED_GROUP


def test_a_side_with_a_smaller_replica_holds_several_per_node() -> None:
    settings = settings_for(
        BASE,
        **{
            "serving.decode.tensor_parallel_size": "1",
            "serving.decode.min_replicas": "2",
            "serving.decode.max_replicas": "4",
        },
    )
    decode = settings.side("decode")
    assert decode.replicas_per_node == decode.gpus_per_node // decode.replica_gpus == 2


def test_an_uneven_split_follows_the_sides_needs() -> None:
    """Prefill is compute-bound, decode memory-bound: a split other than half and half is a
    setting, checked against the node's GPUs like any other. Qwen3-32B's 64 attention heads do
    not split over prefill's 6 GPUs as one rank (model-tensor-parallel-heads), so prefill runs
    three TP-2 replicas on each node."""
    gpus = CATALOG["p5.48xlarge"].gpus
    uneven = {
        "gpu_nodes.shared.instance_type": "p5.48xlarge",
        "gpu_nodes.shared.gpus": f'{{"prefill": {gpus - 2}, "decode": 2}}',
        "serving.model.id": "Qwen/Qwen3-32B",
    }
    (refused,) = [p for p in refusals(BASE, **uneven) if p.code == "model-tensor-parallel-heads"]
    assert refused.path == "serving.prefill.tensor_parallel_size"
    settings = settings_for(
        BASE,
        **uneven,
        **{
            "serving.prefill.tensor_parallel_size": "2",
            "serving.prefill.min_replicas": "3",
            "serving.prefill.max_replicas": "6",
        },
    )
    assert [settings.side(r).tensor_parallel for r in GPU_ROLES] == [2, 2]
    assert [settings.side(r).replicas_per_node for r in GPU_ROLES] == [3, 1]


def test_ucx_on_a_shared_node_is_no_warning() -> None:
    """ucx-on-efa is about KV over EFA; on shared nodes UCX moves it inside the node."""
    codes = {finding.code for finding in warnings(evaluate(settings_for(BASE)))}
    assert "ucx-on-efa" not in codes
    assert {"one-node-prefill", "one-node-decode"} <= codes
