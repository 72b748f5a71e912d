"""pdctl verify: each DP rank's engine core and GPU workers, from Ray's state API.

The answers are built the way Ray 2.58's dashboard builds them: the GCS's protobuf records
(ray.core.generated.gcs_pb2) through the state API's own conversion and column filter
(ray.util.state.common protobuf_message_to_dict, filter_fields), inside the ListApiResponse and
`rest_response` envelope (dashboard/state_api_utils.py, dashboard/routes.py). The rule they are
judged by is Ray Serve LLM's: rank i's engine on bundle i x B, its workers on the i-th B of the
bundles sorted by node, rank 0's node first (dp_server.py, pg_utils.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import asdict
from http.server import ThreadingHTTPServer

import pytest
from ray.core.generated import common_pb2, gcs_pb2
from ray.util.state.common import (
    ActorState,
    ListApiResponse,
    PlacementGroupState,
    filter_fields,
    protobuf_message_to_dict,
)
from typer.testing import CliRunner

from catalog.models import MODEL_CONFIGS
from pdctl import rank_placement
from pdctl.cli import app
from tests.pdctl.test_pdctl_verify import FakeServe

MOE_CONFIG = MODEL_CONFIGS / "Qwen3-30B-A3B.json"

PG = bytes.fromhex("a1" * 18)
NODE_A, NODE_B = bytes.fromhex("0a" * 28), bytes.fromhex("0b" * 28)


def _envelope(rows: list[dict]) -> dict:
    listed = ListApiResponse(
        total=len(rows), num_after_truncation=len(rows), num_filtered=len(rows), result=rows
    )
    return {"result": True, "msg": "", "data": {"result": asdict(listed)}}


def _gang(role: str, bundle_nodes: list[bytes]) -> dict:
    group = gcs_pb2.PlacementGroupTableData(
        placement_group_id=PG,
        state=gcs_pb2.PlacementGroupTableData.CREATED,
        strategy=common_pb2.PACK,
    )
    for index, node in enumerate(bundle_nodes):
        bundle = group.bundles.add()
        bundle.bundle_id.placement_group_id = PG
        bundle.bundle_id.bundle_index = index
        bundle.unit_resources.update({"CPU": 1.0, "GPU": 1.0, role: 1.0})
        bundle.node_id = node
    data = protobuf_message_to_dict(group, ["placement_group_id", "creator_job_id", "node_id"])
    return filter_fields(data, PlacementGroupState, detail=True)


def _actor(number: int, class_name: str, node: bytes) -> dict:
    actor = gcs_pb2.ActorTableData(
        actor_id=number.to_bytes(16, "big"), class_name=class_name, node_id=node,
        placement_group_id=PG, state=gcs_pb2.ActorTableData.ALIVE, pid=1000 + number,
    )  # fmt: skip
    fields = ["actor_id", "owner_id", "job_id", "node_id", "placement_group_id"]
    return filter_fields(protobuf_message_to_dict(actor, fields), ActorState, detail=True)


def _actors(engines: list[bytes], workers: list[bytes]) -> list[dict]:
    replica = "ServeReplica:pd-llm:DPPDDecodeServer"
    return [_actor(i, replica, node) for i, node in enumerate(engines)] + [
        _actor(100 + i, rank_placement.WORKER_CLASS, node) for i, node in enumerate(workers)
    ]


def test_the_state_api_drops_the_actors_owner_so_ranks_follow_rays_bundle_rule() -> None:
    """Why the rule is needed: the list answer has no owner to tie a worker to its engine."""
    assert "owner_id" not in _actor(1, rank_placement.WORKER_CLASS, NODE_A)
    assert "owner_address" not in ActorState.list_columns(detail=True)


A, B = NODE_A.hex(), NODE_B.hex()
# (bundle nodes of a DP 4 x TP 1 gang, the ranks whose engine is off its GPU's node)
LAYOUTS = [
    ([NODE_A] * 4, []),
    ([NODE_A, NODE_A, NODE_B, NODE_B], []),
    # PACK put bundles 0 and 2 on A: sorted [0, 2, 1, 3]; rank 1's engine (bundle 1) is on B,
    # its worker (sorted[1] = bundle 2) on A; rank 2 the other way round.
    ([NODE_A, NODE_B, NODE_A, NODE_B], [1, 2]),
]


@pytest.mark.parametrize(("bundles", "split"), LAYOUTS)
def test_each_ranks_engine_and_worker_nodes_follow_from_the_gangs_bundles(bundles, split) -> None:
    gang = _gang("decode", bundles)
    engines = bundles  # rank i's replica on bundle i (B = 1)
    placed = rank_placement.rank_placements(gang, _actors(engines, bundles), 4, 1)
    assert [p.rank for p in placed if p.split] == split
    (check,) = rank_placement.placement_checks(
        {"decode": (4, 1)}, [gang], _actors(engines, bundles)
    )
    assert check.ok is not split
    for rank in split:
        assert f"rank {rank}: engine {bundles[rank].hex()[:12]}" in check.detail


def test_tp_ranks_take_their_share_of_the_node_sorted_bundles() -> None:
    """DP 2 x TP 2, the dp_server.py docstring's example: bundles on N0, N1, N0, N1; rank 0
    (bundle 0, N0) gets sorted [0, 2] (both N0), rank 1 (bundle 2, N0) gets [1, 3] on N1."""
    bundles = [NODE_A, NODE_B, NODE_A, NODE_B]
    gang = _gang("prefill", bundles)
    placed = rank_placement.rank_placements(gang, _actors([NODE_A, NODE_A], bundles), 2, 2)
    assert [(p.engine_node, set(p.worker_nodes)) for p in placed] == [(A, {A}), (A, {B})]


def test_actors_not_where_the_rule_puts_them_cannot_tell() -> None:
    gang = _gang("decode", [NODE_A, NODE_B, NODE_A, NODE_B])
    wrong = _actors([NODE_A] * 4, [NODE_A, NODE_B, NODE_A, NODE_B])
    (check,) = rank_placement.placement_checks({"decode": (4, 1)}, [gang], wrong)
    assert check.inconclusive
    assert "not where Ray Serve LLM's bundle rule puts them" in check.detail


def test_a_side_without_a_created_gang_cannot_tell() -> None:
    (check,) = rank_placement.placement_checks(
        {"decode": (8, 1)}, [_gang("prefill", [NODE_A] * 8)], []
    )
    assert check.inconclusive


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ({"result": False, "msg": "GCS unavailable", "data": {}}, "GCS unavailable"),
        ({"result": True, "msg": "", "data": {}}, "not the state API's list answer"),
        ([], "the state API refused"),
    ],
)
def test_answers_that_are_not_the_state_apis_list_are_named(answer, fragment) -> None:
    with pytest.raises(rank_placement.PlacementEvidenceError, match=fragment):
        rank_placement.state_api_rows(answer, "placement groups")


class FakeDashboard(FakeServe):
    """FakeServe's endpoint and metrics, and a dashboard's state API behind the Ray token."""

    token = "ray-token"
    groups: list[dict] = []
    actors: list[dict] = []

    def do_GET(self) -> None:  # noqa: N802 (BaseHTTPRequestHandler's name)
        if not self.path.startswith("/api/v0/"):
            super().do_GET()
            return
        if self.headers.get(rank_placement.TOKEN_HEADER) != f"Bearer {self.token}":
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        rows = self.groups if self.path.startswith("/api/v0/placement_groups") else self.actors
        self._send(json.dumps(_envelope(rows)).encode(), "application/json")


@pytest.fixture
def dashboard() -> Iterator[tuple[str, type[FakeDashboard]]]:
    handler = type("Handler", (FakeDashboard,), {"transfers_per_request": 3})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


def _verify(url: str, token: str | None) -> tuple[int, list[dict]]:
    env = {"RAY_AUTH_TOKEN": token} if token else {}
    result = CliRunner().invoke(
        app,
        [
            *("verify", "--url", url, "--metrics-url", f"{url}/metrics", "--metrics-wait", "0"),
            *("--ray-dashboard-url", url, "--json"),
            *("-c", "serving.decode.tensor_parallel_size=1"),
            *("-c", "serving.decode.data_parallel_size=8"),
            # data parallel needs a model with experts (app_config/rules/model_parallel.py): the
            # served model's config.json is an MoE's
            *("-c", f"serving.model.config_file={MOE_CONFIG}"),
        ],
        env=env,
    )
    return result.exit_code, json.loads(result.stdout)


def test_verify_reports_each_ranks_nodes_from_the_dashboard(dashboard) -> None:
    url, handler = dashboard
    handler.groups = [_gang("decode", [NODE_A] * 8)]
    handler.actors = _actors([NODE_A] * 8, [NODE_A] * 8)
    code, checks = _verify(url, handler.token)
    assert code == 0, checks
    ranks = checks[-1]
    assert ranks["name"] == "decode: each DP rank's engine core on its GPUs' node"
    assert ranks["detail"].count("rank ") == 8


def test_without_the_ray_token_verify_cannot_tell_where_the_ranks_run(dashboard) -> None:
    url, handler = dashboard
    handler.groups = [_gang("decode", [NODE_A] * 8)]
    code, checks = _verify(url, None)
    assert code == 2
    assert "wants the Ray token" in checks[-1]["detail"]
