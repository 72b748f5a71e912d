"""Prefix-aware request routing that holds under load: the app's Serve request router.

Serve imports it from the Serve config (``request_router_config.request_router_class:
serve_extensions.prefix_router:PrefixAffinityRouter``) in every process that holds a handle to
the side: for prefill, each decode replica (Ray Serve LLM 2.58's decode server calls prefill
through its handle, prefill_decode/pd_server.py); for decode, the ingress replicas.

Why not Ray Serve LLM 2.58's ``PrefixCacheAffinityRouter`` (routing_policies/prefix_aware/
prefix_aware_router.py): it inherits ``LocalityMixin, MultiplexMixin, RequestRouter`` without
``FIFOMixin`` (line 40). Serve's routing tasks (serve/_private/request_router/request_router.py
``_fulfill_pending_requests``, 1214-1280) pop a request to route (1133-1141) and may leave
without routing it (1243-1244); a task that popped nothing routes with no request, and only
FIFOMixin's ``_fulfill_next_pending_request`` (410-440) gives the replica it found to the
oldest waiting request: RequestRouter's own (1111-1131) matches by request id, so it drops the
replica, the waiting request is never routed, and the task loops at once (no backoff: the
generator is closed after each choice), spawning a background queue-length probe per turn
(1076-1080). Measured on the local Ray (`make e2e`'s stand-in): 3.5 million empty routing
turns in 30 s, over 10,000 probes queued on a prefill replica, every real probe past its
0.1-1.0 s deadline. Its prefix tree also lives in a remote actor reached by blocking ``ray.get``
(263-272, 414-418) from the same loop. See docs/operating.md, "Cache-aware routing".

This router:
  * keeps its index in the router's process (prefix_index.py): no remote call, nothing blocks
    the loop; a request costs one pass of BLAKE2b over at most ``max_prompt_blocks`` blocks;
  * has FIFOMixin, and gives the replica chosen for a request to that request when it still
    waits (else to the oldest), so no routing turn is wasted and none loops;
  * prefers the replica holding the longest prefix of the prompt; a new prefix goes to its
    rendezvous-hash home, so every decode replica's router sends it to the same prefill
    replica without sharing state;
  * bounds load (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam,
    SODA 2018): a preferred replica takes the request only while its requests in flight stay
    below ``load_factor`` x the mean (after this one) or ``min_spread`` above the least
    loaded; else the next in the prefix's order, and if none fits, the less loaded of two
    random replicas (Serve's power-of-two);
  * exports what it predicted (see ``metrics``): prompt blocks routed and blocks the chosen
    replica already held, per target deployment, so the dashboard shows the hit rate per side.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ray.serve._private.common import ReplicaID
from ray.serve._private.constants import SERVE_LOGGER_NAME
from ray.serve._private.request_router.common import PendingRequest
from ray.serve._private.request_router.replica_wrapper import RunningReplica
from ray.serve._private.request_router.request_router import (
    FIFOMixin,
    LocalityMixin,
    MultiplexMixin,
    RequestRouter,
)
from ray.util import metrics

from serve_extensions.prefix_index import PrefixIndex, block_keys, rendezvous_order

logger = logging.getLogger(SERVE_LOGGER_NAME)

# Ray's exporter prefixes ray_ and a counter gets _total: ray_pd_llm_router_prompt_blocks_total.
PROMPT_BLOCKS_METRIC = "pd_llm_router_prompt_blocks"
MATCHED_BLOCKS_METRIC = "pd_llm_router_matched_blocks"
ROUTED_METRIC = "pd_llm_router_requests"
# `deployment` is the side routed to (Prefill:<model>, Decode:<model>), not the caller's: these
# come from ray.util.metrics, so Serve adds no deployment/replica tags of the calling replica.
METRIC_TAGS = ("application", "deployment")
OUTCOMES = ("hit", "miss", "spill")
# A prompt's keys are computed once per request (BLAKE2b over up to 512 blocks: about 3.5 ms for
# 128k characters on a busy 2-core machine) and kept until Serve reports the request routed;
# bounded, for requests cancelled before that.
KEYS_KEPT = 1024


def prompt_text(pending_request: PendingRequest | None) -> str:
    """The prompt as one string: a completion's ``prompt``, or the chat messages' roles and text
    parts. Requests of another shape (none in Serve LLM's OpenAI API) give ''."""
    if pending_request is None:
        return ""
    for arg in pending_request.args or ():
        messages = getattr(arg, "messages", None)
        if messages is not None:
            return "".join(_message_text(message) for message in messages)
        prompt = getattr(arg, "prompt", None)
        if prompt is not None:
            return _text(prompt)
    return ""


def _message_text(message: Any) -> str:
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", "")
    content = (
        message.get("content") if isinstance(message, dict) else getattr(message, "content", "")
    )
    return f"<{role}>{_text(content)}"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return f"{value} "  # token ids
    if isinstance(value, list):
        return "".join(_text(item) for item in value)
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return value["text"]
        return _text(value.get("content"))
    return ""


def within_bound(
    load: int, loads: Iterable[int], load_factor: float, min_spread: int, count: int
) -> bool:
    """Whether a replica with ``load`` requests in flight may take one more: its load stays below
    ``load_factor`` x the mean after this request, or within ``min_spread`` of the least loaded
    (so that a short burst does not split a prefix over replicas that are nearly idle)."""
    loads = list(loads)
    mean_after = (sum(loads) + 1) / count
    return load < max(load_factor * mean_after, min(loads) + min_spread)


class PrefixAffinityRouter(FIFOMixin, LocalityMixin, MultiplexMixin, RequestRouter):
    """Parameters (``request_router_kwargs``):
    block_chars: characters per prompt block (a KV block of 128 tokens is about 500).
    max_blocks: index entries kept, least recently used out (about 190 bytes each).
    max_prompt_blocks: leading blocks of a prompt considered.
    load_factor: bound on a preferred replica's load, as a multiple of the mean.
    min_spread: requests a preferred replica may carry above the least loaded, whatever the mean.
    """

    def initialize_state(
        self,
        block_chars: int = 256,
        max_blocks: int = 65536,
        max_prompt_blocks: int = 512,
        load_factor: float = 1.25,
        min_spread: int = 2,
    ) -> None:
        if block_chars < 1 or max_prompt_blocks < 1 or load_factor < 1 or min_spread < 1:
            raise ValueError(
                "block_chars, max_prompt_blocks and min_spread must be at least 1, "
                "load_factor at least 1.0"
            )
        self._block_chars = block_chars
        self._max_prompt_blocks = max_prompt_blocks
        self._load_factor = load_factor
        self._min_spread = min_spread
        self._index = PrefixIndex(max_blocks)
        self._keys_by_request: OrderedDict[str, list[int]] = OrderedDict()
        tags = {
            "application": self._deployment_id.app_name if self._deployment_id else "",
            "deployment": self._deployment_id.name if self._deployment_id else "",
        }
        self._prompt_blocks = metrics.Counter(
            PROMPT_BLOCKS_METRIC,
            description="Prompt blocks routed by the prefix-aware router.",
            tag_keys=METRIC_TAGS,
        )
        self._prompt_blocks.set_default_tags(tags)
        self._matched_blocks = metrics.Counter(
            MATCHED_BLOCKS_METRIC,
            description="Leading prompt blocks the chosen replica had been sent before "
            "(the router's prediction of a prefix-cache hit).",
            tag_keys=METRIC_TAGS,
        )
        self._matched_blocks.set_default_tags(tags)
        self._routed = metrics.Counter(
            ROUTED_METRIC,
            description="Requests routed, by outcome: hit (the chosen replica held a prefix), "
            "miss (no replica did), spill (another replica held a longer prefix but was "
            "loaded past the bound).",
            tag_keys=(*METRIC_TAGS, "outcome"),
        )
        self._routed.set_default_tags(tags)

    # ---- choosing
    def _keys(self, pending_request: PendingRequest | None, *, last_use: bool = False) -> list[int]:
        if pending_request is None:
            return []
        request_id = pending_request.metadata.internal_request_id
        keys = (
            self._keys_by_request.pop(request_id, None)
            if last_use
            else self._keys_by_request.get(request_id)
        )
        if keys is None:
            keys = block_keys(
                prompt_text(pending_request), self._block_chars, self._max_prompt_blocks
            )
            if not last_use:
                self._keys_by_request[request_id] = keys
                while len(self._keys_by_request) > KEYS_KEPT:
                    self._keys_by_request.popitem(last=False)
        return keys

    def _load(self, replica_id: ReplicaID) -> int:
        """Requests in flight as the router last knew them (probes, sends, completions);
        unknown counts as idle: Serve probes it before sending (_select_from_candidate_replicas)."""
        return self._replica_queue_len_cache.get(replica_id) or 0

    def _candidates(self, pending_request: PendingRequest) -> list[RunningReplica]:
        if pending_request.metadata.multiplexed_model_id:
            ids = self.apply_multiplex_routing(pending_request=pending_request)
        else:
            ids = self.apply_locality_routing(pending_request=pending_request)
        return [self._replicas[i] for i in ids if i in self._replicas]

    @staticmethod
    def _two_choices(replicas: list[RunningReplica]) -> list[RunningReplica]:
        return random.sample(replicas, min(2, len(replicas)))

    def preference(self, keys: list[int], replicas: list[RunningReplica]) -> list[RunningReplica]:
        """Replicas in the order this prompt prefers them: the longest prefix held first, then
        the prefix's rendezvous order (its first block's key)."""
        by_id = {r.replica_id.to_full_id_str(): r for r in replicas}
        home_order = rendezvous_order(keys[0], by_id)
        depth = self._index.match(keys, by_id)
        rank = {replica: position for position, replica in enumerate(home_order)}
        ordered = sorted(by_id, key=lambda replica: (-depth.get(replica, 0), rank[replica]))
        return [by_id[replica] for replica in ordered]

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """Ranks of replicas to try in turn: the preferred replica that is within the load
        bound, then two random ones. A turn with no request (FIFOMixin's) is power-of-two."""
        if pending_request is None:
            return [self._two_choices(candidate_replicas)] if candidate_replicas else []
        replicas = self._candidates(pending_request) or candidate_replicas
        if not replicas:
            return []
        fallback = self._two_choices(replicas)
        keys = self._keys(pending_request)
        if not keys:  # shorter than a block: nothing to reuse
            return [fallback]
        loads = [self._load(r.replica_id) for r in replicas]
        for replica in self.preference(keys, replicas):
            load = self._load(replica.replica_id)
            if within_bound(load, loads, self._load_factor, self._min_spread, len(replicas)):
                return [[replica], fallback]
        return [fallback]

    def _fulfill_next_pending_request(
        self, replica: RunningReplica, request_metadata: Any = None
    ) -> None:
        """The replica chosen for a request goes to that request while it waits (its prefix
        chose it); else, as with power-of-two, to the oldest waiting request."""
        matched = self._get_pending_request_matching_internal_request_id(request_metadata)
        if matched is not None:
            self._record_queue_wait_time(matched)
            matched.future.set_result(replica)
            self._remove_pending_request_from_indices(matched)
            return
        super()._fulfill_next_pending_request(replica, request_metadata)

    # ---- learning
    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        """Called by Serve's router once the replica accepted the request (serve/_private/
        router.py, after the rejection protocol's answer): the replica now holds the prompt."""
        keys = self._keys(pending_request, last_use=True)
        if not keys:
            return
        chosen = replica_id.to_full_id_str()
        depth = self._index.match(keys, [r.to_full_id_str() for r in self._replica_id_set])
        held = depth.get(chosen, 0)
        best = max(depth.values(), default=0)
        outcome = "miss" if best == 0 else ("hit" if held == best else "spill")
        self._prompt_blocks.inc(len(keys))
        if held:
            self._matched_blocks.inc(held)
        self._routed.inc(1, tags={"outcome": outcome})
        self._index.insert(keys, chosen)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self._index.remove_replica(replica_id.to_full_id_str())

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        before = set(self._replica_id_set)
        super().update_replicas(replicas)
        for gone in before - set(self._replica_id_set):
            self._index.remove_replica(gone.to_full_id_str())
