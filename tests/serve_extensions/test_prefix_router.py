"""PrefixAffinityRouter on Serve's own RequestRouter machinery (the installed Ray 2.58), with
replicas that answer probes locally: preference, the load bound, FIFO fulfilment, learning."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from ray.serve._private.common import (
    DeploymentHandleSource,
    DeploymentID,
    ReplicaID,
    RequestMetadata,
)
from ray.serve._private.request_router.common import PendingRequest

from serve_extensions.prefix_router import PrefixAffinityRouter, prompt_text, within_bound

DEPLOYMENT = DeploymentID(name="Prefill:model", app_name="pd")
BLOCK = 16


@dataclass
class FakeReplica:
    """What Serve's router reads of a RunningReplica."""

    replica_id: ReplicaID
    queue_len: int = 0
    node_id: str = "node"
    availability_zone: str | None = None
    multiplexed_model_ids: set[str] = field(default_factory=set)
    max_ongoing_requests: int = 1000
    is_cross_language: bool = False

    async def get_queue_len(self, *, deadline_s: float) -> int:
        return self.queue_len


@dataclass
class Chat:
    messages: list[dict[str, Any]]


def request(text: str) -> PendingRequest:
    metadata = RequestMetadata(request_id=str(uuid.uuid4()), internal_request_id=str(uuid.uuid4()))
    return PendingRequest(
        args=[Chat([{"role": "user", "content": text}])], kwargs={}, metadata=metadata
    )


def make_router(count: int, **kwargs: Any) -> tuple[PrefixAffinityRouter, list[FakeReplica]]:
    router = PrefixAffinityRouter(
        deployment_id=DEPLOYMENT,
        handle_source=DeploymentHandleSource.REPLICA,
        use_replica_queue_len_cache=True,
    )
    router.initialize_state(**{"block_chars": BLOCK, **kwargs})
    replicas = [FakeReplica(ReplicaID(f"r{i}", DEPLOYMENT)) for i in range(count)]
    router.update_replicas(replicas)
    return router, replicas


def set_loads(router: PrefixAffinityRouter, replicas: list[FakeReplica], loads: list[int]) -> None:
    for replica, load in zip(replicas, loads, strict=True):
        replica.queue_len = load
        router.replica_queue_len_cache.update(replica.replica_id, load)


async def route(router: PrefixAffinityRouter, pending: PendingRequest) -> ReplicaID:
    """Serve's path: queue the request, let the routing tasks pick, then report it routed."""
    replica = await asyncio.wait_for(router._choose_replica_for_request(pending), 5)
    router.on_send_request(replica.replica_id)
    router.on_request_routed(pending, replica.replica_id, None)
    return replica.replica_id


PROMPT = "shared system prompt " * 8  # ten blocks


def test_a_repeated_prefix_returns_to_the_replica_that_has_it() -> None:
    async def scenario() -> set[ReplicaID]:
        router, replicas = make_router(4)
        chosen = set()
        for question in range(8):
            set_loads(router, replicas, [0, 0, 0, 0])
            chosen.add(await route(router, request(f"{PROMPT} question {question}")))
        return chosen

    assert len(asyncio.run(scenario())) == 1


def test_a_new_prefix_goes_to_the_same_home_in_every_router() -> None:
    """Two routers (two decode replicas) that share nothing agree on a prefix they never saw."""

    async def scenario() -> list[ReplicaID]:
        homes = []
        for _ in range(2):
            router, _replicas = make_router(4)
            homes.append(await route(router, request(f"{PROMPT} first")))
        return homes

    first, second = asyncio.run(scenario())
    assert first == second


@pytest.mark.parametrize(
    ("loads", "spills"),
    [
        ([0, 0], False),
        ([1, 0], False),  # within min_spread (2) of the least loaded
        ([2, 0], True),
        ([10, 6], False),  # below 1.25 x the mean after this request (10.6)
        ([12, 6], True),
    ],
)
def test_a_busy_preferred_replica_gives_way_to_load(loads: list[int], spills: bool) -> None:
    async def scenario() -> bool:
        router, replicas = make_router(2)
        set_loads(router, replicas, [0, 0])
        home = await route(router, request(f"{PROMPT} warm"))
        ordered = sorted(replicas, key=lambda r: r.replica_id != home)  # home first
        set_loads(router, ordered, loads)
        return await route(router, request(f"{PROMPT} next")) != home

    assert asyncio.run(scenario()) is spills


@pytest.mark.parametrize(
    ("load", "loads", "fits"),
    [(0, [0, 0], True), (1, [1, 0], True), (2, [2, 0], False), (11, [11, 6], True)],
)
def test_the_load_bound(load: int, loads: list[int], fits: bool) -> None:
    assert within_bound(load, loads, 1.25, 2, len(loads)) is fits


def test_concurrent_requests_are_all_routed_and_no_routing_turn_is_wasted() -> None:
    """What stalled Ray 2.58's PrefixCacheAffinityRouter: with many requests at once, every one
    is routed, and once they are, no routing task is left turning."""

    async def scenario() -> tuple[int, int]:
        router, _replicas = make_router(2)
        calls = 0
        choose = router.choose_replicas

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return await choose(*args, **kwargs)

        router.choose_replicas = counted  # type: ignore[method-assign]
        pending = [request(f"{PROMPT} {i % 3} " * 3) for i in range(64)]
        routed = await asyncio.gather(*(route(router, p) for p in pending))
        await asyncio.sleep(0.2)
        settled = calls
        await asyncio.sleep(0.2)
        return len(routed), calls - settled + router.curr_num_routing_tasks

    routed, still_turning = asyncio.run(scenario())
    assert routed == 64
    assert still_turning == 0


def test_the_hit_rate_counters_see_each_routed_prompt() -> None:
    async def scenario() -> list[tuple[str, float]]:
        router, replicas = make_router(2)
        seen: list[tuple[str, float]] = []
        for counter, name in (
            (router._prompt_blocks, "prompt"),
            (router._matched_blocks, "matched"),
        ):
            counter.inc = lambda value=1.0, tags=None, name=name: seen.append((name, value))  # type: ignore[method-assign]
        for _ in range(2):
            set_loads(router, replicas, [0, 0])
            await route(router, request(PROMPT))
        return seen

    assert asyncio.run(scenario()) == [("prompt", 10), ("prompt", 10), ("matched", 10)]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            [Chat([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])],
            "<system>s<user>u",
        ),
        ([Chat([{"role": "user", "content": [{"type": "text", "text": "part"}]}])], "<user>part"),
        ([type("Completion", (), {"prompt": "plain"})()], "plain"),
        ([type("Completion", (), {"prompt": [1, 2]})()], "1 2 "),
        ([object()], ""),
    ],
)
def test_the_prompt_text(args: list[Any], text: str) -> None:
    async def extract() -> str:  # a PendingRequest holds an asyncio future: made in a loop
        metadata = RequestMetadata(request_id="r", internal_request_id="i")
        return prompt_text(PendingRequest(args=args, kwargs={}, metadata=metadata))

    assert asyncio.run(extract()) == text


@pytest.mark.parametrize(
    "kwargs", [{"block_chars": 0}, {"load_factor": 0.5}, {"min_spread": 0}, {"max_blocks": 0}]
)
def test_settings_that_cannot_route_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="at least"):
        asyncio.run(_make(kwargs))


async def _make(kwargs: dict[str, Any]) -> None:
    make_router(1, **kwargs)


def test_a_replica_found_without_a_request_goes_to_the_oldest_waiting_one() -> None:
    """The defect that stalls Ray 2.58's PrefixCacheAffinityRouter (no FIFOMixin): a routing
    task can pop a request and leave without routing it (request_router.py 1243-1244); the
    tasks left route with no request of their own, and what they find must reach the waiting
    request, else it waits for ever while they turn."""

    async def scenario() -> bool:
        router, replicas = make_router(2)
        waiting = request(PROMPT)
        router._pending_requests_to_fulfill.append(waiting)  # popped from the route queue
        router._add_pending_request_to_indices(waiting)
        router._fulfill_next_pending_request(replicas[0], None)
        return waiting.future.done() and waiting.future.result() is replicas[0]

    assert asyncio.run(scenario())


def test_a_replica_chosen_for_a_request_goes_to_that_request_not_the_oldest() -> None:
    """Its prefix chose the replica: FIFO order alone would hand it to whoever waited longest."""

    async def scenario() -> bool:
        router, replicas = make_router(2)
        oldest, chosen_for = request("old"), request(PROMPT)
        for pending in (oldest, chosen_for):
            router._pending_requests_to_fulfill.append(pending)
            router._add_pending_request_to_indices(pending)
        router._fulfill_next_pending_request(replicas[1], chosen_for.metadata)
        return chosen_for.future.done() and not oldest.future.done()

    assert asyncio.run(scenario())


def test_a_prompt_is_hashed_once_per_request_and_nothing_is_kept_after(monkeypatch) -> None:
    from serve_extensions import prefix_router

    calls = []
    real = prefix_router.block_keys
    monkeypatch.setattr(prefix_router, "block_keys", lambda *a: calls.append(1) or real(*a))

    async def scenario() -> int:
        router, replicas = make_router(2)
        set_loads(router, replicas, [0, 0])
        await route(router, request(PROMPT))
        return len(router._keys_by_request)

    assert asyncio.run(scenario()) == 0
    # At most once: Ray 2.58's routing task may take the request with no pending request in hand
    # (request_router.py _fulfill_pending_requests: _get_next_pending_request_to_route() can be
    # None when another task took it), and then chooses without the prompt, hashing nothing.
    # That affinity is computed at all is what the routing tests above hold.
    assert len(calls) <= 1


def test_keys_of_requests_never_reported_routed_are_bounded() -> None:
    from serve_extensions.prefix_router import KEYS_KEPT

    async def scenario() -> int:
        router, replicas = make_router(2)
        for index in range(KEYS_KEPT + 10):
            await router.choose_replicas(replicas, request(f"{PROMPT} {index}"))
        return len(router._keys_by_request)

    assert asyncio.run(scenario()) == KEYS_KEPT
