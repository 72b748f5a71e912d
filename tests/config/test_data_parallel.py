"""Data and expert parallel per side: the rules a DP group's shape must follow before anything is
deployed (Ray Serve LLM 2.58 gang scheduling, vLLM 0.26 ParallelConfig), checked as classes of
mistakes over the whole instance catalog rather than by the examples' numbers."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from app_config import ConfigError, load_settings
from app_config import engine_options as options
from app_config.node_labels import GPU_ROLES
from catalog.expert_parallel import ALL2ALL_BACKENDS, SUPPORTED_ALL2ALL_BACKENDS
from catalog.instances import CATALOG
from serving_manifests.serve_config import render_serve_config
from tests.configurations import PROJECT_ROOT, context_for, settings_for

DEEPSEEK = "deepseek-v3-pd"


# The shape rules are judged on an MoE model: data parallel of a dense one is refused by its own
# rule (app_config/rules/model_parallel.py). Its config has experts and a context length but no
# sizes, so the weights-per-GPU rule, which would refuse a real model on one small GPU, stays out.
MOE_MODEL = {
    "serving.model.config_file": str(PROJECT_ROOT / "tests/data/model_configs/moe-layout-only.json")
}


def _load(**overrides: Any) -> Any:
    given = {**MOE_MODEL, **{k: str(v) for k, v in overrides.items()}}
    return load_settings(context_for("default", **given), {})


def _problems(**overrides: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as raised:
        _load(**overrides)
    return {problem.path: str(problem) for problem in raised.value.problems}


def _kwargs(settings: Any, role: str) -> dict[str, Any]:
    (application,) = render_serve_config(settings)["applications"]
    return application["args"][f"{role}_config"]["engine_kwargs"]


def _shape(instance: str, dp: int, tp: int, nodes: int, **extra: Any) -> dict[str, Any]:
    """One side (prefill) of the given shape, node counts in whole groups where it spans nodes."""
    return {
        "gpu_nodes.prefill.instance_type": instance,
        "gpu_nodes.decode.instance_type": instance,  # one GPU generation on both sides
        "gpu_nodes.prefill.scaling.min_size": nodes,
        "gpu_nodes.prefill.scaling.desired_size": nodes,
        "gpu_nodes.prefill.scaling.max_size": 2 * nodes,
        "serving.prefill.tensor_parallel_size": tp,
        "serving.prefill.data_parallel_size": dp,
        "serving.prefill.expert_parallel": "true",
        **extra,
    }


# Instances of different GPU counts (1, 4, 8) stand for the catalog's shapes.
SHAPES = sorted({instance.gpus: name for name, instance in CATALOG.items()}.items())


@pytest.mark.parametrize(("gpus", "instance"), SHAPES)
def test_every_accepted_group_tiles_a_node_or_fills_whole_nodes(gpus: int, instance: str) -> None:
    """Across DP 1..3x a node's GPUs and every TP that divides the node: an accepted shape leaves
    no GPU that no rank could use, and the node count it derives is whole; a refused one is
    refused on data_parallel_size with the values that would fit."""
    tps = [tp for tp in range(1, gpus + 1) if gpus % tp == 0]
    for tp, dp in itertools.product(tps, range(2, 3 * gpus + 1)):
        group_gpus = dp * tp
        nodes = -(-group_gpus // gpus)
        tiles = gpus % group_gpus == 0 or group_gpus % gpus == 0
        overrides = _shape(instance, dp, tp, nodes)
        if tiles:
            settings = _load(**overrides)
            assert settings.nodes_per_replica("prefill") == nodes
            assert settings.dp_group_gpus("prefill") == group_gpus
            assert _kwargs(settings, "prefill")["data_parallel_size"] == dp
        else:
            problems = _problems(**overrides)
            assert set(problems) == {"serving.prefill.data_parallel_size"}, problems
            message = problems["serving.prefill.data_parallel_size"]
            assert f"{group_gpus} GPUs" in message
            assert "use one of" in message


@pytest.mark.parametrize(
    ("size", "counts"),
    [
        ("min_size", {"min_size": 1, "desired_size": 2, "max_size": 4}),
        ("desired_size", {"min_size": 2, "desired_size": 3, "max_size": 4}),
        ("max_size", {"min_size": 2, "desired_size": 2, "max_size": 5}),
    ],
)
def test_node_counts_come_in_whole_groups_when_a_group_spans_nodes(
    size: str, counts: dict[str, int]
) -> None:
    """p5 has 8 GPUs: DP 16 x TP 1 spans 2 nodes, so an odd count holds an idle node."""
    overrides = _shape("p5.48xlarge", 16, 1, 2) | {
        f"gpu_nodes.prefill.scaling.{name}": count for name, count in counts.items()
    }
    problems = _problems(**overrides)
    assert set(problems) == {f"gpu_nodes.prefill.scaling.{size}"}
    assert "multiple of 2" in problems[f"gpu_nodes.prefill.scaling.{size}"]


def test_reserved_instances_come_in_whole_groups() -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(
            context_for(DEEPSEEK, **{"gpu_nodes.decode.capacity.reserved_instances": "5"}), {}
        )
    problems = {problem.path: str(problem) for problem in raised.value.problems}
    assert set(problems) == {"gpu_nodes.decode.capacity.reserved_instances"}
    assert "multiple of 2" in problems["gpu_nodes.decode.capacity.reserved_instances"]


def test_max_replicas_count_groups_against_the_nodes_the_side_can_grow_to() -> None:
    overrides = _shape("p5.48xlarge", 16, 1, 2) | {"serving.prefill.max_replicas": 3}
    problems = _problems(**overrides)
    assert set(problems) == {"serving.prefill.max_replicas"}
    assert "3 replicas x 16 GPUs" in problems["serving.prefill.max_replicas"]


def test_a_rank_must_still_fit_one_node() -> None:
    problems = _problems(**_shape("p5.48xlarge", 2, 16, 4))
    assert "serving.prefill.tensor_parallel_size" in problems


@pytest.mark.parametrize("backend", sorted(ALL2ALL_BACKENDS))
def test_each_all2all_backend_runs_on_efa_or_is_refused_with_its_reason(backend: str) -> None:
    overrides = _shape("p5.48xlarge", 8, 1, 1, **{"serving.prefill.all2all_backend": backend})
    if ALL2ALL_BACKENDS[backend] is None:
        assert _kwargs(_load(**overrides), "prefill")["all2all_backend"] == backend
        return
    problems = _problems(**overrides)
    message = problems["serving.prefill.all2all_backend"]
    assert ALL2ALL_BACKENDS[backend] in message
    assert repr(SUPPORTED_ALL2ALL_BACKENDS[0]) in message


def test_an_unknown_all2all_backend_is_refused() -> None:
    problems = _problems(**{"serving.decode.all2all_backend": "deepep"})
    assert "not an all-to-all backend of vLLM 0.26" in problems["serving.decode.all2all_backend"]


@pytest.mark.parametrize(
    ("overrides", "setting", "said"),
    [
        ({"serving.prefill.eplb.enabled": "true"}, "serving.prefill", "enable_expert_parallel"),
        (
            {"serving.prefill.eplb.num_redundant_experts": "8"},
            "serving.prefill.eplb",
            "refuses redundant experts without EPLB",
        ),
        (
            _shape("p5.48xlarge", 1, 1, 1, **{"serving.prefill.eplb.enabled": "true"}),
            "serving.prefill.eplb.enabled",
            "EPLB requires tensor, prefill-context, or data parallelism",
        ),
    ],
)
def test_eplb_follows_vllms_rules(overrides: dict[str, str], setting: str, said: str) -> None:
    problems = _problems(**overrides)
    assert said in problems[setting], problems


@pytest.mark.parametrize(
    "option",
    ["enable_expert_parallel", "all2all_backend", "enable_eplb", "eplb_config", "enable_dbo"],
)
def test_parallel_options_are_refused_as_engine_options(option: str) -> None:
    problems = _problems(**{"serving.engine_options": f'{{"{option}": true}}'})
    assert options.OWNED[option] in problems[f"serving.engine_options.{option}"]


def test_a_dense_sides_engine_kwargs_carry_no_parallel_keys() -> None:
    """vLLM's defaults stay vLLM's: a configuration without DP or EP renders what it did."""
    for role in GPU_ROLES:
        kwargs = _kwargs(settings_for("default"), role)
        assert not {"data_parallel_size", "enable_expert_parallel", "enable_eplb"} & set(kwargs)


@pytest.mark.parametrize("example", [DEEPSEEK, "qwen3-235b-a22b-pd"])
def test_an_moe_examples_engine_kwargs_are_all_refused_as_options(example: str) -> None:
    """Every key the renderer writes for a DP/EP side is the project's, never a user's option."""
    settings = settings_for(example)
    for role in GPU_ROLES:
        written = _kwargs(settings, role)
        mine = set(written) - set(settings.serving.engine_options_for(role))
        assert mine <= set(options.OWNED), mine - set(options.OWNED)


def test_eplb_moves_weights_over_nccl_and_synchronously() -> None:
    """vLLM 0.26 EPLBConfig refuses an NCCL communicator with use_async (the NCCL multi-stream
    conflict), and its default picks NIXL, whose agent takes UCX (the slow path on EFA)."""
    eplb = _kwargs(settings_for(DEEPSEEK), "decode")["eplb_config"]
    assert eplb["communicator"] in {"pynccl", "torch_nccl"}
    assert eplb["use_async"] is False
    assert (
        eplb["num_redundant_experts"]
        == settings_for(DEEPSEEK).serving.decode.eplb.num_redundant_experts
    )


# vLLM 0.26 default_loader.py _init_ep_weight_filter: filters only with enable_expert_parallel,
# without enable_eplb, over EP = TP x DP > 1, through the plain safetensors iterator.
EP_WEIGHT_FILTER = [
    ({}, True),
    ({"serving.prefill.eplb.enabled": "true", "serving.prefill.eplb.num_redundant_experts": 16},
     False),  # EPLB: vLLM skips the filter (redundant slots need every expert)
    ({"serving.prefill.expert_parallel": "false"}, False),
    ({"serving.prefill.engine_options": '{"load_format": "fastsafetensors"}'}, False),
    ({"serving.prefill.engine_options": '{"load_format": "safetensors"}'}, True),
    ({"serving.prefill.engine_options":
      '{"model_loader_extra_config": {"enable_multithread_load": true}}'}, False),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "filtered"), EP_WEIGHT_FILTER)
def test_each_rank_reads_only_its_experts_where_vllm_honours_the_filter(
    overrides: dict[str, Any], filtered: bool
) -> None:
    settings = load_settings(context_for(DEEPSEEK, **overrides), {})
    kwargs = _kwargs(settings, "prefill")
    assert kwargs.get("enable_ep_weight_filter", False) is filtered
    assert "enable_ep_weight_filter" not in _kwargs(settings, "decode")  # decode runs EPLB


def test_the_ep_weight_filter_is_the_projects_option() -> None:
    problems = _problems(**{"serving.engine_options": '{"enable_ep_weight_filter": true}'})
    assert (
        options.OWNED["enable_ep_weight_filter"]
        in problems["serving.engine_options.enable_ep_weight_filter"]
    )
