"""`pdctl verify`'s prefix-reuse line: did prefill's prefix cache spare the second of two identical
prompts the computation of the first? Evidence from the prefill workers' Prometheus metrics,
vLLM 0.26's own counters (vllm/v1/metrics/loggers.py ``vllm:prefix_cache_queries`` and
``vllm:prefix_cache_hits``, ``ray_vllm_..._total`` under Ray Serve).

vLLM counts them per new request when it schedules it (vllm/v1/core/kv_cache_manager.py
``get_computed_blocks``): queries grow by the request's tokens, hits by the tokens of the
longest run of whole cached blocks, and never by the last token (it is computed again for its
logits). So a prompt of n tokens seen before on the same replica hits
``(n - 1) // block_size * block_size`` tokens: the expected value is computed from the first
request's own count, not from a tokenizer pdctl does not have.

The same rule as the rest of verify: positive, finite, complete evidence. Counters that cannot
separate the two requests (other traffic between them, a restart) are "cannot tell"; a miss
is "no" only when the routing should have reached the replica that cached the prompt.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from catalog.metrics import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES
from pdctl.checks import Check, failed, passed, undecided
from pdctl.verify import metric_totals

NAME = "prefix reuse on a repeated prompt (prefill's prefix cache)"
QUERIES = PREFIX_CACHE_QUERIES.name.removeprefix("ray_vllm_")
HITS = PREFIX_CACHE_HITS.name.removeprefix("ray_vllm_")
# Whole KV blocks the prompt fills at the least: one word is at least one token for the
# tokenizers of the catalog's models, and the chat template only adds tokens.
PROMPT_BLOCKS = 3
# Each answer is not the point: one token is all prefill makes anyway (Ray clamps it).
ANSWER_TOKENS = 4
FILLER = (
    "the",
    "prompt",
    "repeats",
    "so",
    "that",
    "prefill",
    "finds",
    "its",
    "blocks",
    "cached",
)


def repeated_prompt(block_size: int, nonce: str | None = None) -> str:
    """A prompt of at least PROMPT_BLOCKS whole blocks, unique to this check from its first
    word on: no earlier request shares even its first block, so the first request misses."""
    nonce = nonce or uuid.uuid4().hex
    words = [FILLER[index % len(FILLER)] for index in range(PROMPT_BLOCKS * block_size)]
    return f"pdctl verify {nonce}: " + " ".join(words)


@dataclass(frozen=True)
class CacheCounts:
    """Prefill's prefix-cache counters, summed over its workers' metrics endpoints."""

    queries: float
    hits: float
    sources: int
    seen: bool  # whether any prefix-cache counter was there at all


def cache_counts(metrics_texts: list[str]) -> CacheCounts:
    (queries, seen_queries), (hits, seen_hits) = metric_totals(metrics_texts, QUERIES, HITS)
    return CacheCounts(queries, hits, len(metrics_texts), seen_queries or seen_hits)


def await_counts(
    read: Callable[[], CacheCounts],
    settled: Callable[[CacheCounts], bool],
    wait_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    interval: float = 0.5,
) -> CacheCounts:
    """Reads until ``settled`` says the counters show the request or ``wait_seconds`` passed;
    what they show then. Ray exports a worker's metrics every report interval (10 s), and a
    counter only from its first non-zero increment (vllm/v1/metrics/ray_wrappers.py)."""
    deadline = clock() + wait_seconds
    while True:
        counts = read()
        if settled(counts) or clock() >= deadline:
            return counts
        sleep(interval)


def moved_since(reference: CacheCounts) -> Callable[[CacheCounts], bool]:
    """Settled once a request's lookup shows: the prompt tokens counted, or the set of
    endpoints changed (a restart, which the verdict then reports)."""
    return lambda now: now.queries != reference.queries or now.sources != reference.sources


def _whole(values: Iterable[float]) -> bool:
    return all(math.isfinite(value) and value >= 0 and value == int(value) for value in values)


def expected_hits(prompt_tokens: float, block_size: int) -> int:
    """The tokens vLLM reuses of an n-token prompt it has cached whole: every whole block of
    the first n - 1 tokens (kv_cache_manager.py, max_cache_hit_length = num_tokens - 1)."""
    return int(prompt_tokens - 1) // block_size * block_size


def reuse_verdict(
    before: CacheCounts,
    first: CacheCounts,
    second: CacheCounts,
    block_size: int,
    router: str,
    max_replicas: int,
) -> Check:
    """Yes when the second of two identical prompts hit at least every whole block of it in
    prefill's prefix cache. Counters that cannot tell the two requests apart are "cannot
    tell"; so is a miss under power-of-two routing over more than one replica, where the
    second request may simply have reached another replica."""
    if second.sources == 0 or not second.seen:
        return undecided(
            f"{NAME}: cannot tell",
            f"no prefix-cache counters on {second.sources} endpoint(s)",
            "point --prefill-metrics-url at the prefill workers' metrics port (8080); vLLM "
            "counts prefix-cache lookups on every engine with log_engine_metrics",
        )
    reset = (
        first.queries < before.queries
        or second.queries < first.queries
        or first.hits < before.hits
        or second.hits < first.hits
        or len({before.sources, first.sources, second.sources}) > 1
    )
    if reset:
        return undecided(
            f"{NAME}: cannot tell",
            "a counter went down or an endpoint came or went during the check: a prefill "
            "worker restarted",
            "run pdctl verify again once the prefill workers are steady",
        )
    tokens_first, tokens_second = first.queries - before.queries, second.queries - first.queries
    hits_first, hits_second = first.hits - before.hits, second.hits - first.hits
    if not _whole((tokens_first, tokens_second, hits_first, hits_second)):
        return undecided(
            f"{NAME}: cannot tell",
            f"the counters moved by {tokens_first:g} and {tokens_second:g} tokens: not whole "
            "counts",
            "these are not a prefill worker's vLLM metrics; check --prefill-metrics-url",
        )
    if tokens_first <= 0 or tokens_second <= 0:
        return undecided(
            f"{NAME}: cannot tell",
            f"prefill counted {tokens_first:.0f} and {tokens_second:.0f} prompt tokens for the "
            "two requests: a lookup did not show in its metrics within --metrics-wait",
            "wait longer (--metrics-wait) or check that --prefill-metrics-url is a prefill "
            "worker's",
        )
    if tokens_second != tokens_first:
        return undecided(
            f"{NAME}: cannot tell",
            f"two identical prompts were counted as {tokens_first:.0f} and {tokens_second:.0f} "
            "tokens: other requests reached prefill during the check",
            "run pdctl verify again while the endpoint is idle",
        )
    expected = expected_hits(tokens_first, block_size)
    detail = (
        f"the second of two identical {tokens_first:.0f}-token prompts found "
        f"{hits_second:.0f} tokens in prefill's prefix cache, against the "
        f"{expected // block_size} whole {block_size}-token blocks ({expected} tokens) the "
        f"first left there (the first found {hits_first:.0f})"
    )
    if expected < block_size:
        return undecided(
            f"{NAME}: cannot tell",
            f"{detail}: shorter than one block",
            "these are not the prompts of this check; check --prefill-metrics-url",
        )
    if hits_second >= expected:
        return passed(f"{NAME}: yes", detail)
    if router == "power_of_two" and max_replicas > 1:
        return undecided(
            f"{NAME}: cannot tell",
            f"{detail}; prefill routes by power_of_two over up to {max_replicas} replicas, so "
            "the second request may have reached another replica",
            "serving.prefill.request_router prefix_affinity (the default) sends a repeated "
            "prefix to the replica that computed it",
        )
    return failed(
        f"{NAME}: {'partly' if hits_second > 0 else 'no'}",
        detail,
        "prefill computed the prompt again: check that serving.prefill.engine_options does "
        "not set enable_prefix_caching false, and that the engine did not evict the blocks "
        "between the two requests (ray_vllm_kv_cache_usage_perc near 1 on prefill)",
    )


def prefix_caching_off(engine_options: dict) -> bool:
    """vLLM 0.26 turns prefix caching on by default for generative models
    (vllm/config/cache.py enable_prefix_caching); only an explicit false turns it off."""
    return engine_options.get("enable_prefix_caching") is False


def not_checked(reason: str) -> Check:
    return passed(f"{NAME}: not checked", reason)
