"""Which replica has seen which prompt prefix: a bounded, process-local index of prompt blocks.

A prompt is cut into blocks of ``block_chars`` characters; each block's key is a hash chained
over every block before it (as vLLM keys its KV-cache blocks: a block's hash covers its whole
prefix, vllm/v1/core/kv_cache_utils.py ``hash_block_tokens``), so one key names one whole
prefix and two prompts share a key exactly where they share that prefix. A trailing partial
block is left out: vLLM caches full blocks only.

Keys are BLAKE2b digests, not Python's ``hash()``: every router process (one per decode replica)
must compute the same keys and the same rendezvous order (prefix_router.py) without talking to
each other, and ``hash()`` of a str is salted per process (PYTHONHASHSEED).

Memory is bounded by ``max_blocks`` entries, least recently used first out; an entry is an int
key and the few replica ids that hold it. Nothing here blocks or does I/O: it runs on Serve's
shared routing loop.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence

DIGEST_BYTES = 8


def block_keys(text: str, block_chars: int, max_blocks: int) -> list[int]:
    """The chained keys of the prompt's full blocks, at most ``max_blocks`` of them (the first:
    a cache hit is a prefix, so later blocks only matter after earlier ones)."""
    keys: list[int] = []
    previous = b""
    limit = min(len(text) // block_chars, max_blocks)
    for index in range(limit):
        block = text[index * block_chars : (index + 1) * block_chars]
        digest = hashlib.blake2b(
            previous + block.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES
        ).digest()
        keys.append(int.from_bytes(digest, "big"))
        previous = digest
    return keys


def rendezvous_order(key: int, replicas: Iterable[str]) -> list[str]:
    """Replicas by highest random weight for ``key`` (Thaler and Ravishankar, "Using name-based
    mappings to increase hit rates", 1998): every router computes the same order, and removing
    a replica moves only the keys it was first for."""
    seed = key.to_bytes(DIGEST_BYTES, "big")

    def weight(replica: str) -> bytes:
        return hashlib.blake2b(seed + replica.encode(), digest_size=DIGEST_BYTES).digest()

    return sorted(replicas, key=weight, reverse=True)


class PrefixIndex:
    """Block key -> the replicas that were sent a prompt containing that block, LRU-bounded."""

    def __init__(self, max_blocks: int) -> None:
        if max_blocks < 1:
            raise ValueError("max_blocks must be at least 1")
        self.max_blocks = max_blocks
        self._holders: OrderedDict[int, list[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._holders)

    def match(self, keys: Sequence[int], replicas: Iterable[str]) -> dict[str, int]:
        """For each of ``replicas``, how many of the prompt's leading blocks it holds (replicas
        holding none are left out). Matched entries count as used."""
        depth: dict[str, int] = {}
        alive = set(replicas)
        for position, key in enumerate(keys):
            holders = self._holders.get(key)
            if not holders:
                break
            self._holders.move_to_end(key)
            alive = alive.intersection(holders)
            if not alive:
                break
            for replica in alive:
                depth[replica] = position + 1
        return depth

    def insert(self, keys: Sequence[int], replica: str) -> None:
        """Record that ``replica`` now holds every block of ``keys``; evicts the least recently
        used entries beyond ``max_blocks``."""
        for key in keys:
            holders = self._holders.get(key)
            if holders is None:
                self._holders[key] = [replica]
            else:
                if replica not in holders:
                    holders.append(replica)
                self._holders.move_to_end(key)
        while len(self._holders) > self.max_blocks:
            self._holders.popitem(last=False)

    def remove_replica(self, replica: str) -> None:
        """Forget a replica that left (its cache went with it)."""
        empty = []
        for key, holders in self._holders.items():
            if replica in holders:
                holders.remove(replica)
                if not holders:
                    empty.append(key)
        for key in empty:
            del self._holders[key]
