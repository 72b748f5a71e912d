"""Where each DP rank's vLLM engine core and its GPU workers run, read from Ray's state API, so
that `pdctl verify` can show a rank whose engine core sits on another node than its GPUs
(docs/architecture.md, "Data and expert parallel": a limit of Ray 2.58 that `make e2e` found).

What Ray 2.58 exposes, and what it does not:
- The dashboard's state API (`GET /api/v0/placement_groups?detail=true`, ray/dashboard/
  state_aggregator.py `list_placement_groups`) gives every placement group with its `bundles`,
  each `{"bundle_id": {"placement_group_id", "bundle_index"}, "unit_resources", "node_id"}`
  (the GCS's PlacementGroupTableData through `protobuf_message_to_dict`, ids in hex), inside
  the dashboard's envelope `{"result": true, "msg": "", "data": {"result": {"result": [...]}}}`
  (dashboard/routes.py `rest_response`, state_api_utils.py `handle_list_api`).
  `GET /api/v0/actors?detail=true` gives each actor's `class_name`, `state`, `node_id` and
  `placement_group_id` (ray/util/state/common.py ActorState) but not its owner: the state API
  filters the GCS record down to ActorState's columns (state_aggregator.py `list_actors`,
  `do_filter`), so a GPU worker cannot be tied to the engine that created it.
- Which bundles a rank's workers take is Ray Serve LLM's rule
  (ray/llm/_internal/serve/serving_patterns/data_parallel/dp_server.py `DPServer.__init__` and
  `_compute_bundle_indices`): the gang's placement group concatenates B bundles per rank
  (B = TP x PP), rank i's replica actor (vLLM's engine core) takes bundle i x B, and its
  workers take `sorted[i*B:(i+1)*B]` of the bundle indices sorted by node, rank 0's node first
  (ray/llm/_internal/serve/utils/pg_utils.py `_sort_bundle_indices_by_node`). This module
  applies that rule to the bundles' nodes, and checks it against the actors it can see: the
  engine cores' nodes must be those the rule names, else the answer is "cannot tell". (`make
  e2e` recorded the same rule from inside each rank: docs/verification.md, the data-parallel
  row, `ranks_with_engine_core_off_their_gpus_node`.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

# vLLM 0.26's GPU worker actor (vllm/v1/executor/ray_utils.py RayWorkerWrapper) and Serve's
# replica actor class, "ServeReplica:<application>:<deployment>" (ray/serve/_private/common.py).
WORKER_CLASS = "RayWorkerWrapper"
REPLICA_CLASS_PREFIX = "ServeReplica:"


class PlacementEvidenceError(Exception):
    """The state API's answer cannot decide where the ranks run."""


@dataclass(frozen=True)
class RankPlacement:
    rank: int
    engine_node: str
    worker_nodes: tuple[str, ...]

    @property
    def split(self) -> bool:
        return set(self.worker_nodes) != {self.engine_node}


def state_api_rows(answer: Any, what: str) -> list[dict[str, Any]]:
    """The list inside the dashboard's envelope, or PlacementEvidenceError saying why not."""
    if not isinstance(answer, dict) or answer.get("result") is not True:
        message = answer.get("msg") if isinstance(answer, dict) else None
        raise PlacementEvidenceError(f"{what}: the state API refused ({message or answer!r:.80})")
    try:
        rows = answer["data"]["result"]["result"]
    except (KeyError, TypeError):
        raise PlacementEvidenceError(f"{what}: not the state API's list answer") from None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise PlacementEvidenceError(f"{what}: not the state API's list answer")
    return rows


def _bundle_nodes(group: dict[str, Any]) -> dict[int, str]:
    nodes = {}
    for bundle in group.get("bundles") or []:
        try:
            index, node = int(bundle["bundle_id"]["bundle_index"]), str(bundle["node_id"])
        except (KeyError, TypeError, ValueError):
            raise PlacementEvidenceError("a bundle without its index or node") from None
        nodes[index] = node
    return dict(sorted(nodes.items()))


def side_gangs(groups: list[dict[str, Any]], resource: str, ranks: int, bundles_per_rank: int):
    """The side's gang placement groups that Ray created: every bundle asks for the side's own
    Ray resource (serving_manifests/serve_config.py ray_resource) and there is one per GPU of
    every rank."""
    for group in groups:
        bundles = group.get("bundles") or []
        if group.get("state") != "CREATED" or len(bundles) != ranks * bundles_per_rank:
            continue
        if all(resource in (bundle.get("unit_resources") or {}) for bundle in bundles):
            yield group


def _sorted_by_node(bundle_nodes: dict[int, str], driver_node: str) -> list[int]:
    """pg_utils.py `_sort_bundle_indices_by_node`: the driver's (rank 0's) node's bundles first,
    then each other node's in node-id order, bundle indices ascending within a node."""
    by_node: dict[str, list[int]] = {}
    for index, node in bundle_nodes.items():
        by_node.setdefault(node, []).append(index)
    ordered = by_node.pop(driver_node, [])
    for node in sorted(by_node):
        ordered += by_node[node]
    return ordered


def rank_placements(
    group: dict[str, Any], actors: list[dict[str, Any]], ranks: int, bundles_per_rank: int
) -> list[RankPlacement]:
    """Each rank's engine node and worker nodes in one gang, by Ray's rule; checked against the
    engine cores (replica actors) the state API shows in that placement group."""
    bundle_nodes = _bundle_nodes(group)
    if sorted(bundle_nodes) != list(range(ranks * bundles_per_rank)):
        raise PlacementEvidenceError("the gang's bundles are not numbered 0..n-1")
    engines = [bundle_nodes[rank * bundles_per_rank] for rank in range(ranks)]
    ordered = _sorted_by_node(bundle_nodes, engines[0])
    placements = [
        RankPlacement(
            rank,
            engines[rank],
            tuple(bundle_nodes[i] for i in ordered[rank * bundles_per_rank :][:bundles_per_rank]),
        )
        for rank in range(ranks)
    ]
    alive = [
        actor
        for actor in actors
        if actor.get("placement_group_id") == group.get("placement_group_id")
        and actor.get("state") == "ALIVE"
    ]
    seen_engines = Counter(
        str(a.get("node_id"))
        for a in alive
        if str(a.get("class_name")).startswith(REPLICA_CLASS_PREFIX)
    )
    seen_workers = Counter(
        str(a.get("node_id")) for a in alive if a.get("class_name") == WORKER_CLASS
    )
    if seen_engines != Counter(engines) or seen_workers != Counter(bundle_nodes.values()):
        raise PlacementEvidenceError(
            "the gang's live engine cores and GPU workers are not where Ray Serve LLM's bundle "
            "rule puts them (a gang still starting, or a Ray whose rule changed)"
        )
    return placements


# Ray's token authentication (Ray 2.52+): the dashboard's APIs want the cluster's token in this
# header (manifests/rayservice.yaml's own readiness probe sends it so).
TOKEN_HEADER = "x-ray-authorization"
STATE_BYTES_MAX = 50_000_000
PLACEMENT_GROUPS_PATH = "/api/v0/placement_groups?detail=true&limit=10000"
ACTORS_PATH = (
    "/api/v0/actors?detail=true&limit=100000"
    "&filter_keys=state&filter_predicates=%3D&filter_values=ALIVE"
)


def read_state(dashboard_url: str, token: str | None, timeout: float) -> tuple[list, list]:
    """(placement groups, live actors) from the dashboard (a port-forward of the head's 8265,
    the RayDashboardCommand output); PlacementEvidenceError when it cannot be read."""
    import json

    from pdctl.http_call import Deadline, HttpCallError, open_response, read_body

    headers = {TOKEN_HEADER: f"Bearer {token}"} if token else {}
    answers = []
    for path, what in ((PLACEMENT_GROUPS_PATH, "placement groups"), (ACTORS_PATH, "actors")):
        url = dashboard_url.rstrip("/") + path
        deadline = Deadline(timeout)
        try:
            with open_response("GET", url, deadline, headers=headers) as response:
                data = read_body(response, deadline, f"Ray state API {what}", STATE_BYTES_MAX)
                status = response.status
        except HttpCallError as error:
            raise PlacementEvidenceError(str(error)) from None
        if status in (401, 403):
            raise PlacementEvidenceError(
                f"Ray state API {what}: HTTP {status}: the dashboard wants the Ray token"
            )
        try:
            answer = json.loads(data)
        except ValueError:
            raise PlacementEvidenceError(f"Ray state API {what}: HTTP {status}, not JSON") from None
        answers.append(state_api_rows(answer, f"Ray state API {what}"))
    groups, actors = answers
    return groups, actors


def placement_checks(
    sides: dict[str, tuple[int, int]], groups: list[dict[str, Any]], actors: list[dict[str, Any]]
) -> list[Any]:
    """One check per side that runs DP ranks ({role: (ranks, bundles per rank)}): each rank's
    engine node and worker nodes, failed where any rank's differ."""
    from pdctl.checks import failed, passed, undecided

    checks = []
    for role, (ranks, per_rank) in sides.items():
        name = f"{role}: each DP rank's engine core on its GPUs' node"
        gangs = list(side_gangs(groups, role, ranks, per_rank))
        if not gangs:
            checks.append(
                undecided(name, f"no created gang of {ranks} x {per_rank} {role} bundles",
                          "wait for the RayService to turn healthy")
            )  # fmt: skip
            continue
        try:
            placed = [rank_placements(gang, actors, ranks, per_rank) for gang in gangs]
        except PlacementEvidenceError as error:
            checks.append(undecided(name, str(error), "run it again once every gang is RUNNING"))
            continue
        described = [
            (
                f"group {g} rank {p.rank}: engine {p.engine_node[:12]}, workers "
                + ",".join(sorted({node[:12] for node in p.worker_nodes})),
                p.split,
            )
            for g, group in enumerate(placed)
            for p in group
        ]
        lines = [line for line, _ in described]
        split = [line for line, apart in described if apart]
        if split:
            checks.append(
                failed(
                    name,
                    "; ".join(split),
                    "each engine step's messages cross nodes (docs/architecture.md, 'Data and "
                    "expert parallel'); restart the group (delete one of its worker pods) so "
                    "Ray places it again",
                )
            )
        else:
            checks.append(passed(name, "; ".join(lines)))
    return checks
