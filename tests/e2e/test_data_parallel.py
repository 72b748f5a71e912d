"""Data-parallel P/D (issue 24): each side a DP group of ranks that Ray Serve gang-schedules
over several GPU nodes, restarts as a whole and scales in whole groups.

Two configurations, each rendered by the project's own code (tools/write_manifests.py: the
RayService `cdk synth` embeds, from the same settings and validation), never written by hand:

- ``LOCAL_VARIANT`` runs on a local Ray of its own (dp_scenarios.py): 4-GPU nodes (g6e.12xlarge),
  each side DP 2 x TP 4 = 8 GPUs = 2 nodes, so every DP group spans two nodes and every rank
  holds four bundles. The session's `pd` cluster is not used: the scenario starts when the
  session has collected these tests and runs beside the other modules (conftest.py,
  harness.Background), which its bounds (minutes) allow.
- examples/deepseek-v3-pd.yaml (p5en, DP 16 x TP 1 = 2 nodes per side) goes through Ray's own
  autoscaler code (autoscaler_view.py): what KubeRay's autoscaler launches for a pending DP group.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import PROJECT_ROOT, RAYSERVICE, Background, Scenario, Synthesized, rendering

SIDES = ("prefill", "decode")
SCENARIO = "data-parallel"
DP_SIZE, TP_SIZE, NODE_GPUS = 2, 4, 4  # g6e.12xlarge: 4 GPUs
LOCAL_VARIANT = {
    # vLLM runs external data parallel (one engine per rank) only for MoE models.
    "serving.model.id": "Qwen/Qwen3-30B-A3B",
    "gpu_nodes.prefill.instance_type": "g6e.12xlarge",
    "gpu_nodes.decode.instance_type": "g6e.12xlarge",
    "gpu_nodes.prefill.scaling": '{"min_size": 2, "desired_size": 2, "max_size": 4}',
    "gpu_nodes.decode.scaling": '{"min_size": 2, "desired_size": 2, "max_size": 4}',
    "serving.prefill": json.dumps(
        {"tensor_parallel_size": TP_SIZE, "data_parallel_size": DP_SIZE, "expert_parallel": True}
    ),
    "serving.decode": json.dumps(
        {
            "tensor_parallel_size": TP_SIZE,
            "data_parallel_size": DP_SIZE,
            "expert_parallel": True,
            "max_replicas": 2,
            # 128 routed + 8 redundant experts divide over the 8 EP ranks (TP 4 x DP 2), as
            # vLLM's EPLB needs (model-eplb-experts; 2 redundant, 130, did not).
            "eplb": {"enabled": True, "num_redundant_experts": 8},
            # Scale on the first request in flight above one per rank, at once.
            "autoscaling": {"target_ongoing_requests": 1, "upscale_delay_s": 0},
        }
    ),
}
DEEPSEEK = PROJECT_ROOT / "examples" / "deepseek-v3-pd.yaml"
DEEPSEEK_GPU = "H200"  # p5en.48xlarge


def background_scenarios(synthesized: Synthesized, out: Path) -> dict[str, Scenario]:
    """Started at collection (conftest.py pytest_collection_finish): both RayServices rendered
    by the project's code, then the scenario on the local variant."""
    folder = out / SCENARIO
    local, deepseek = folder / "local", folder / "deepseek"
    render = rendering(folder, local={"overrides": LOCAL_VARIANT}, deepseek={"config": DEEPSEEK})
    args = (
        *(str(local / RAYSERVICE), str(out / f"{SCENARIO}.json")),
        *("--group-nodes", str(DP_SIZE * TP_SIZE // NODE_GPUS), "--load-requests", "3"),
        *("--autoscaler-view", str(deepseek / RAYSERVICE), DEEPSEEK_GPU),
    )
    return {SCENARIO: Scenario("dp_scenarios.py", args, prepare=render)}


@pytest.fixture(scope="module")
def dp(background: Background, figures: dict[str, Any]) -> dict[str, Any]:
    folder = background.log_dir / SCENARIO
    result = background.result(SCENARIO)
    result["rayservice"] = json.loads((folder / "local" / RAYSERVICE).read_text())
    result["autoscaler_view"]["rayservice"] = json.loads(
        (folder / "deepseek" / RAYSERVICE).read_text()
    )
    restart = result["gang_restart"]
    figures["data_parallel"] = {
        "ray_start_s": result["ray_start_s"],
        "running_after_s": result["running_after_s"],
        "gang_replaced_and_running_s": restart["replaced_and_running_s"],
        "endpoint_answers_after_kill_s": restart["endpoint_answers_s"],
        "replica_states_after_kill": restart["states_seen"],
        "second_group_running_after_load_s": result["scale_up"]["running_after_s"],
        "decode_targets_seen": result["scale_up"]["targets_seen"],
        # Ranks whose engine core (the replica actor) runs on another node than its GPUs.
        "ranks_with_engine_core_off_their_gpus_node": sum(
            set(r["data_parallel"]["bundle_nodes"].values()) != {r["node_id"]}
            for r in result["starts"]
            if r.get("data_parallel")
        ),
    }
    return result


def ranks(result: dict[str, Any], side: str, key: str = "starts") -> list[dict[str, Any]]:
    return [r["data_parallel"] for r in result[key] if r["role"] == side and r.get("data_parallel")]


@pytest.mark.parametrize("side", SIDES)
def test_each_side_runs_one_gang_of_distinct_ranks(dp: dict[str, Any], side: str) -> None:
    started = ranks(dp, side)
    assert sorted(r["rank"] for r in started) == list(range(DP_SIZE))
    assert {r["size"] for r in started} == {DP_SIZE}
    assert len({r["gang_id"] for r in started}) == 1
    # Serve's gang rank is the DP rank; every rank knows every member.
    assert all(r["gang_rank"] == r["rank"] for r in started)
    assert all(r["gang_world_size"] == DP_SIZE for r in started)
    assert len({tuple(r["gang_members"]) for r in started}) == 1
    # One PACK placement group for the gang, one bundle per GPU of every rank.
    assert {r["strategy"] for r in started} == {"PACK"}
    assert {r["bundle_count"] for r in started} == {DP_SIZE * TP_SIZE}
    assert {r["world_size_across_dp"] for r in started} == {DP_SIZE * TP_SIZE}


@pytest.mark.parametrize("side", SIDES)
def test_every_rank_uses_rank_0s_master_and_bundles_of_its_own_on_one_node(
    dp: dict[str, Any], side: str
) -> None:
    started = {r["rank"]: r for r in ranks(dp, side)}
    rank0 = started[0]
    # The address and port rank 0 registered (the GCS KV), on rank 0's node, reached every rank.
    assert {(r["address"], r["rpc_port"]) for r in started.values()} == {
        (rank0["master"]["address"], rank0["master"]["port"])
    }
    assert {r["master"]["node_id"] for r in started.values()} == {rank0["node_id"]}
    # Disjoint bundle shares covering the gang; each rank's TP group on one node; rank 0's on
    # rank 0's node, where vLLM's global rank 0 hosts the rendezvous store at the advertised
    # address. (Another rank's replica actor, its engine core, sits on gang bundle rank x TP,
    # which PACK may have put on the other node: Ray 2.58 does not align the two.)
    shares = [set(r["bundle_indices"]) for r in started.values()]
    assert sum(len(s) for s in shares) == len(set().union(*shares)) == DP_SIZE * TP_SIZE
    for rank in started.values():
        assert len(rank["bundle_indices"]) == TP_SIZE
        assert len(set(rank["bundle_nodes"].values())) == 1, rank
    assert set(rank0["bundle_nodes"].values()) == {rank0["node_id"]}


@pytest.mark.parametrize("side", SIDES)
def test_each_gang_spans_the_sides_nodes(dp: dict[str, Any], side: str) -> None:
    started = ranks(dp, side)
    nodes = {node for r in started for node in r["bundle_nodes"].values()}
    side_nodes = {n["node_id"] for n in dp["nodes"] if n["role"] == side}
    assert nodes == side_nodes
    assert len(nodes) == DP_SIZE * TP_SIZE // NODE_GPUS == 2


def test_ranks_got_the_rendered_expert_parallel_settings(dp: dict[str, Any]) -> None:
    for side in SIDES:
        assert {r["expert_parallel"] for r in ranks(dp, side)} == {True}
        assert {r["all2all_backend"] for r in ranks(dp, side)} == {"allgather_reducescatter"}
    assert {r["eplb"] is None for r in ranks(dp, "prefill")} == {True}
    # EPLB's weight moves on NCCL, synchronously: what vLLM built from the rendered config.
    assert [r["eplb"] for r in ranks(dp, "decode")] == [
        {"enabled": True, "communicator": "pynccl", "use_async": False, "num_redundant_experts": 8}
    ] * DP_SIZE


@pytest.mark.parametrize("side", SIDES)
def test_serve_counts_replicas_in_whole_groups(dp: dict[str, Any], side: str) -> None:
    """The Serve config says min/max in DP groups; Ray's DPServer multiplies them by the DP
    size, and Serve gang-schedules PACK and restarts the whole gang."""
    rendered = yaml.safe_load(dp["rayservice"]["spec"]["serveConfigV2"])
    bounds = rendered["applications"][0]["args"][f"{side}_config"]["deployment_config"][
        "autoscaling_config"
    ]
    serve = dp["serve"][side]
    assert serve["autoscaling_config"]["min_replicas"] == bounds["min_replicas"] * DP_SIZE
    assert serve["autoscaling_config"]["max_replicas"] == bounds["max_replicas"] * DP_SIZE
    assert serve["target_num_replicas"] % DP_SIZE == 0
    assert serve["gang_scheduling_config"] == {
        "gang_size": DP_SIZE,
        "gang_placement_strategy": "PACK",
        "runtime_failure_policy": "RESTART_GANG",
    }
    assert len(serve["replicas"]) == serve["target_num_replicas"]


def test_requests_go_through_decode_ranks_to_prefill_ranks(dp: dict[str, Any]) -> None:
    served: dict[str, Counter] = {side: Counter() for side in SIDES}
    for request in dp["requests"]:
        assert request["status"] == 200, request
        (prefill,) = [r for r in request["records"] if r["phase"] == "prefill"]
        (decode,) = [r for r in request["records"] if r["phase"] == "decode"]
        assert prefill["role"] == "prefill"
        assert decode["role"] == "decode"
        assert prefill["time_start"] <= decode["time_start"]
        # Decode got exactly what prefill's rank returned.
        assert decode["kv_transfer_params"] == prefill["kv_transfer_params_out"]
        assert prefill["kv_transfer_params_out"]["remote_request_id"] == prefill["request_id"]
        assert request["body"]["choices"][0]["text"] == decode["output_text"]
        served["prefill"][prefill["dp_rank"]] += 1
        served["decode"][decode["dp_rank"]] += 1
    # Every rank of both sides served (power-of-two routing over the ranks).
    assert set(served["prefill"]) == set(served["decode"]) == set(range(DP_SIZE)), served


def test_one_dead_rank_restarts_its_whole_gang_and_only_it(dp: dict[str, Any]) -> None:
    restart = dp["gang_restart"]
    side, other = "decode", "prefill"
    before = {r["replica_id"] for r in restart["before"][side]}
    after = {r["replica_id"] for r in restart["after"][side]}
    assert restart["killed_replica"] in before
    assert len(after) == len(before) == DP_SIZE
    assert not before & after  # every rank replaced, the healthy one too
    assert {r["state"] for r in restart["after"][side]} == {"RUNNING"}
    # The other side's gang untouched: same replicas, no engine started again.
    assert restart["after"][other] == restart["before"][other]
    assert len(ranks(dp, other, "starts_after_restart")) == DP_SIZE
    # The new gang: a new gang id, ranks 0..dp-1 again, rank 0's master again.
    new = [
        r["data_parallel"]
        for r in dp["starts_after_restart"]
        if r["role"] == side and r["replica"] in after
    ]
    assert sorted(r["rank"] for r in new) == list(range(DP_SIZE))
    old_gang = {r["gang_id"] for r in ranks(dp, side)}
    assert len({r["gang_id"] for r in new}) == 1
    assert not {r["gang_id"] for r in new} & old_gang
    assert restart["answer_status"] == 200
    assert restart["endpoint_answers_s"] >= restart["replaced_and_running_s"]


# ------------------------------------------------------------------- the Ray autoscaler's view
@pytest.fixture(scope="module")
def autoscaler(dp: dict[str, Any]) -> dict[str, Any]:
    """autoscaler_view.py's verdicts on examples/deepseek-v3-pd.yaml (run in the DP scenario's
    process, which has Ray connected already)."""
    return dp["autoscaler_view"]


def deepseek_side(side: str) -> dict[str, Any]:
    return yaml.safe_load(DEEPSEEK.read_text())["serving"][side]


@pytest.mark.parametrize("side", SIDES)
def test_the_autoscaler_sees_a_dp_group_as_whole_nodes_of_its_side(
    autoscaler: dict[str, Any], side: str
) -> None:
    engine = deepseek_side(side)
    gang = autoscaler["gangs"][side]
    assert gang["gang_size"] == engine["data_parallel_size"]
    assert (gang["strategy"], gang["failure_policy"]) == ("PACK", "RESTART_GANG")
    node = autoscaler["node_types"][side]["resources"]
    group_gpus = sum(bundle.get("GPU", 0) for bundle in gang["bundles"])
    nodes_per_group = -(-group_gpus // node["GPU"])
    assert nodes_per_group == 2
    # The worker group's bounds are whole groups of nodes.
    for bound in ("min", "max"):
        assert autoscaler["node_types"][side][bound] % nodes_per_group == 0
    # A pending next group: Ray launches exactly its nodes, of its side only, even with the
    # other side's nodes idle; nothing is terminated.
    for case in (f"next-group-{side}", f"next-group-{side}-other-side-idle"):
        decision = autoscaler["cases"][case]
        assert decision == {
            "launch": {side: nodes_per_group},
            "terminate": [],
            "infeasible_gangs": 0,
        }


@pytest.mark.parametrize("side", SIDES)
def test_an_accelerator_type_in_the_bundles_would_never_scale(
    autoscaler: dict[str, Any], side: str
) -> None:
    """Why serve_config.py leaves the LLMConfig's accelerator_type out: Ray Serve LLM would put
    an accelerator_type:<GPU> share in every bundle, which no KubeRay worker group advertises,
    so the autoscaler finds the gang infeasible and launches nothing."""
    rendered = yaml.safe_load(autoscaler["rayservice"]["spec"]["serveConfigV2"])
    assert "accelerator_type" not in rendered["applications"][0]["args"][f"{side}_config"]
    case = autoscaler["cases"][f"accelerator-type-{side}"]
    assert f"accelerator_type:{DEEPSEEK_GPU}" in case["bundle"]
    assert (case["launch"], case["infeasible_gangs"]) == ({}, 1)


def test_a_side_scales_up_by_a_whole_group(dp: dict[str, Any]) -> None:
    """Three requests in flight at one per replica: Serve's queue-length policy asks for three
    decode replicas, its gang policy rounds that up to whole groups (Ray 2.58
    serve/_private/gang_scheduling_autoscaling_policy.py): four, never three. The new group is
    a gang of its own on the nodes that arrived; the running one is left alone."""
    scale = dp["scale_up"]
    assert scale["requests_in_flight"] % DP_SIZE != 0
    targets = [target for _, target in scale["targets_seen"]]
    assert all(target % DP_SIZE == 0 for target in targets), targets
    assert max(targets) == 2 * DP_SIZE
    after = {r["replica_id"]: r for r in scale["after"]}
    running = [r for r in after.values() if r["state"] == "RUNNING"]
    assert len(running) == 2 * DP_SIZE
    assert set(scale["before"]) <= set(after)  # the first group kept
    new = [
        r["data_parallel"]
        for r in dp["starts_after_scale_up"]
        if r["role"] == "decode" and r["replica"] in set(after) - set(scale["before"])
    ]
    assert sorted(r["rank"] for r in new) == list(range(DP_SIZE))
    assert len({r["gang_id"] for r in new}) == 1
    old_gangs = {
        r["data_parallel"]["gang_id"] for r in dp["starts_after_restart"] if r.get("data_parallel")
    }
    assert not {r["gang_id"] for r in new} & old_gangs
    added = {n["node_id"] for n in dp["nodes_after_scale_up"] if n["role"] == "decode"} - {
        n["node_id"] for n in dp["nodes"] if n["role"] == "decode"
    }
    assert len(added) == scale["nodes_added"]
    assert {node for r in new for node in r["bundle_nodes"].values()} == added
