"""A data-parallel P/D variant on a Ray cluster of its own (a process of its own: `LocalRay`
refuses a second `import ray`). test_data_parallel.py renders the variant's RayService with the
project's code and runs this with the e2e venv's Python; this writes what it saw as JSON:

    python tests/e2e/dp_scenarios.py RAYSERVICE.json OUT.json [--autoscaler-view RAYSERVICE GPU]

One cluster start: deploy (each side a gang of data_parallel_size ranks over several fake-GPU
nodes), requests through the endpoint (decode ranks call prefill ranks), then one decode rank's
replica actor is killed and Serve's gang restart is timed until the endpoint answers again;
last, decode's nodes for one more DP group arrive (as Ray's autoscaler would launch them) and a
load that asks for one replica more than a group makes Serve add a whole group.
``--autoscaler-view`` also runs autoscaler_view.py's check of another rendered RayService in this
process, while it is connected to the local cluster (a process of its own would start a Ray
instance of its own only for the runtime context Ray Serve LLM reads).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from harness import PROJECT_ROOT, LocalRay, Synthesized, http, wait_for

RUN_DIR = Path(os.environ.get("PD_E2E_RUN_DIR", PROJECT_ROOT / "build" / "e2e")) / "data-parallel"
DEPLOY_TIMEOUT_S = 420.0
RESTART_TIMEOUT_S = 300.0
SCALE_TIMEOUT_S = 300.0
# Each output token of the stand-in takes this long here, so that the scale-up load is a few
# requests held for a minute each (not thousands of tokens on a busy machine).
TOKEN_DELAY_S = 0.05
LOAD_TOKENS = 1200  # 60 s per request at TOKEN_DELAY_S
SIDES = {"prefill": "Prefill:", "decode": "Decode:"}


def side_deployment(cluster: LocalRay, side: str) -> dict[str, Any]:
    """Serve's view of the side's deployment (GET /api/serve/applications/)."""
    deployments = cluster.applications()[cluster.app_name]["deployments"]
    (found,) = [d for name, d in deployments.items() if name.startswith(SIDES[side])]
    return found


def replicas(cluster: LocalRay, side: str) -> list[dict[str, Any]]:
    return [
        {key: replica.get(key) for key in ("replica_id", "state", "node_id", "actor_name")}
        for replica in side_deployment(cluster, side)["replicas"]
    ]


def serve_view(cluster: LocalRay, side: str) -> dict[str, Any]:
    deployment = side_deployment(cluster, side)
    config = deployment["deployment_config"]
    return {
        "status": deployment["status"],
        "target_num_replicas": deployment.get("target_num_replicas"),
        "autoscaling_config": {
            key: (config.get("autoscaling_config") or {}).get(key)
            for key in ("min_replicas", "max_replicas", "initial_replicas")
        },
        "gang_scheduling_config": config.get("gang_scheduling_config"),
        "replicas": replicas(cluster, side),
    }


def engine_starts(cluster: LocalRay) -> list[dict[str, Any]]:
    return [r for r in cluster.records() if r["event"] == "start"]


def complete(cluster: LocalRay, model: str, marker: str, timeout: float = 60) -> dict[str, Any]:
    status, body = http(
        "POST",
        f"{cluster.base_url}/v1/completions",
        {"model": model, "prompt": f"{marker} tell me about gangs", "max_tokens": 4},
        timeout=timeout,
    )
    return {"marker": marker, "status": status, "body": json.loads(body) if status == 200 else body}


def requests_through_the_endpoint(cluster: LocalRay, model: str, count: int) -> list[dict]:
    """``count`` completions; each record pair (prefill, decode) is found by its marker."""
    sent = [complete(cluster, model, f"marker-{uuid.uuid4().hex}") for _ in range(count)]
    records = [r for r in cluster.records() if r["event"] == "request"]
    for request in sent:
        request["records"] = [r for r in records if request["marker"] in r.get("prompt", "")]
    return sent


def kill_one_rank(cluster: LocalRay, side: str, rank: int) -> dict[str, Any]:
    """Kill the replica actor of ``rank`` on ``side`` (as when its process or node dies) and
    wait until Serve has the side RUNNING on replicas that are all new; then until the
    endpoint answers. Times from the kill."""
    import ray

    before = {side_name: replicas(cluster, side_name) for side_name in SIDES}
    started = {r["replica"]: r for r in engine_starts(cluster)}
    (victim,) = [
        r
        for r in before[side]
        if (started.get(r["replica_id"], {}).get("data_parallel") or {}).get("rank") == rank
    ]
    old_ids = {r["replica_id"] for r in before[side]}
    killed_at = time.monotonic()
    ray.kill(ray.get_actor(victim["actor_name"], namespace="serve"), no_restart=True)
    seen_states: list[list[Any]] = []

    def replaced() -> bool:
        now = replicas(cluster, side)
        states = sorted((r["replica_id"] in old_ids, r["state"]) for r in now)
        if not seen_states or seen_states[-1][1] != states:
            seen_states.append([round(time.monotonic() - killed_at, 1), states])
        running = [r for r in now if r["state"] == "RUNNING"]
        return len(running) == len(old_ids) and not {r["replica_id"] for r in now} & old_ids

    wait_for(replaced, RESTART_TIMEOUT_S, 0.5, f"{side} gang replaced")
    running_at = time.monotonic()
    model = cluster.config["applications"][0]["args"]["decode_config"]["model_loading_config"][
        "model_id"
    ]
    answer = wait_for(
        lambda: (lambda a: a if a["status"] == 200 else None)(
            complete(cluster, model, f"after-{uuid.uuid4().hex}", timeout=30)
        ),
        RESTART_TIMEOUT_S,
        1.0,
        "an answer after the gang restart",
    )
    answered_at = time.monotonic()
    return {
        "side": side,
        "killed_rank": rank,
        "killed_replica": victim["replica_id"],
        "before": before,
        "after": {side_name: replicas(cluster, side_name) for side_name in SIDES},
        "states_seen": seen_states,  # (is an old replica, state), by seconds since the kill
        "replaced_and_running_s": round(running_at - killed_at, 1),
        "endpoint_answers_s": round(answered_at - killed_at, 1),
        "answer_status": answer["status"],
    }


def scale_up_one_group(
    cluster: LocalRay, model: str, side: str, nodes: int, requests: int
) -> dict[str, Any]:
    """``nodes`` more nodes of ``side`` (one DP group's), then ``requests`` long requests in
    flight: with target_ongoing_requests 1 Serve's policy asks for ``requests`` replicas, and
    its gang policy rounds that up to whole groups. Records every target Serve set."""
    before = {r["replica_id"] for r in replicas(cluster, side)}
    for _ in range(nodes):
        cluster.add_worker(side)
    answers: list[dict[str, Any]] = []

    def one() -> None:
        try:
            status, _ = http(
                "POST",
                f"{cluster.base_url}/v1/completions",
                {"model": model, "prompt": f"load-{uuid.uuid4().hex}", "max_tokens": LOAD_TOKENS},
                timeout=SCALE_TIMEOUT_S,
            )
        except OSError as cut:  # the cluster stops while the load still runs
            status = repr(cut)
        answers.append({"status": status})

    threads = [threading.Thread(target=one, daemon=True) for _ in range(requests)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    targets: list[list[Any]] = []

    def scaled() -> bool:
        view = serve_view(cluster, side)
        if not targets or targets[-1][1] != view["target_num_replicas"]:
            targets.append([round(time.monotonic() - started, 1), view["target_num_replicas"]])
        running = [r for r in view["replicas"] if r["state"] == "RUNNING"]
        # A gang's ranks turn RUNNING one by one: wait for all of them.
        target = view["target_num_replicas"]
        return target > len(before) and len(running) == target

    wait_for(scaled, SCALE_TIMEOUT_S, 1.0, f"{side} scaled up")
    running_at = time.monotonic()
    return {
        "side": side,
        "nodes_added": nodes,
        "requests_in_flight": requests,
        "targets_seen": targets,  # (seconds since the load started, Serve's target replicas)
        "before": sorted(before),
        "after": replicas(cluster, side),
        "running_after_s": round(running_at - started, 1),
        "answers_so_far": answers,  # the load's requests are still running
    }


def data_parallel_pd(synthesized: Synthesized, options: argparse.Namespace) -> dict[str, Any]:
    cluster = LocalRay(
        synthesized, RUN_DIR, extra_env={"STANDIN_TOKEN_DELAY_S": str(TOKEN_DELAY_S)}
    )
    try:
        cluster.start()
        start = time.monotonic()
        cluster.deploy(cluster.config, DEPLOY_TIMEOUT_S)
        result: dict[str, Any] = {
            "nodes": [{"role": n.role, "node_id": n.node_id} for n in cluster.nodes],
            "ray_start_s": round(cluster.timings["ray_start_s"], 1),
            "running_after_s": round(time.monotonic() - start, 1),
            "serve": {side: serve_view(cluster, side) for side in SIDES},
            "starts": engine_starts(cluster),
        }
        model = cluster.config["applications"][0]["args"]["decode_config"]["model_loading_config"][
            "model_id"
        ]
        if options.autoscaler_view:
            from autoscaler_view import view

            rayservice, gpu = options.autoscaler_view
            result["autoscaler_view"] = view(json.loads(Path(rayservice).read_text()), gpu)
        result["requests"] = requests_through_the_endpoint(cluster, model, options.requests)
        result["gang_restart"] = kill_one_rank(cluster, "decode", options.kill_rank)
        result["starts_after_restart"] = engine_starts(cluster)
        result["scale_up"] = scale_up_one_group(
            cluster, model, "decode", options.group_nodes, options.load_requests
        )
        result["starts_after_scale_up"] = engine_starts(cluster)
        result["nodes_after_scale_up"] = [
            {"role": n.role, "node_id": n.node_id} for n in cluster.nodes
        ]
        return result
    finally:
        cluster.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("rayservice", type=Path, help="the rendered RayService, as JSON")
    parser.add_argument("out", type=Path)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--group-nodes", type=int, default=2, help="nodes of one DP group")
    parser.add_argument("--load-requests", type=int, default=3)
    parser.add_argument("--autoscaler-view", nargs=2, metavar=("RAYSERVICE", "GPU_MODEL"))
    options = parser.parse_args(argv)
    rayservice = json.loads(options.rayservice.read_text())
    maps = options.rayservice.with_name("config-maps.json")  # harness.CONFIG_MAPS
    config_maps = json.loads(maps.read_text()) if maps.exists() else {}
    synthesized = Synthesized(
        rayservice=rayservice, scrape_config={}, queries="", config_maps=config_maps
    )
    result = data_parallel_pd(synthesized, options)
    options.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
