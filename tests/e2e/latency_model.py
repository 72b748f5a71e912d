"""The stand-in engine's model of a real engine's latency under load (STANDIN_LATENCY_MODEL).

The latency-policy replay (latency_replay_local.py) needs replicas whose latency answers load as
a GPU engine's does, or no policy has anything to decide: the stand-in's plain mode sleeps a
fixed time per token however many streams it runs. The shape is the one tools/latency_replay.py
fits to the benchmark tier's real-engine figures (`fit()`, docs/gpu-bench/):

- prefill is one FIFO server: a prompt waits for the prompts before it, then takes
  `prefill_step_s + prompt tokens x prefill_s_per_token`;
- decode's step takes `decode_step_s + decode_s_per_running x running sequences`;
- decode's KV pull takes `handoff_s_per_token` per prompt token it reads;
- an engine is ready `start_s[side]` after it starts loading.

Decode's running sequences are its streams and their companions: the replay sends one request
in `thinning` through Serve (what two cores carry), and the requests it thinned away are
companions, each with its arrival time and answer length on a timeline the load generator
writes as its load starts (STANDIN_COMPANIONS). Each running decode replica takes its share
(`CompanionFeed`, `assigned`: the replica list the generator keeps beside it, as Serve reports
it) and runs them as sequences of its own (`Companions`): they take their part of every step
and produce no output. So a decode replica runs the sequences a real one would (about 75 on the
long answers, where the streams alone were 2 or 3), each at a real sequence's cost, with the
spread of a random split of the real arrivals, while Serve carries the thinned load
(tools/latency_replay_scale.py says why the counts match).

The figures themselves come from tools/latency_replay_scale.py (the fit, scaled for the local
run). Pure (no Ray, no project import): the stand-in imports it in every replica.
"""

from __future__ import annotations

import heapq
import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class EngineLatency:
    prefill_step_s: float
    prefill_s_per_token: float
    decode_step_s: float
    decode_s_per_running: float
    handoff_s_per_token: float
    start_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        numbers = {k: v for k, v in asdict(self).items() if k != "start_s"}
        negative = {k: v for k, v in {**numbers, **self.start_s}.items() if v < 0}
        if negative:
            raise ValueError(f"a latency model's times are not negative: {negative}")

    def prefill_time(self, prompt_tokens: int) -> float:
        return self.prefill_step_s + self.prefill_s_per_token * prompt_tokens

    def step_time(self, running: int) -> float:
        return self.decode_step_s + self.decode_s_per_running * max(1, running)

    def handoff_time(self, prompt_tokens: int) -> float:
        return self.handoff_s_per_token * prompt_tokens

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, value: str | None) -> EngineLatency | None:
        """None where the variable is unset or empty (the stand-in's plain mode)."""
        if not value:
            return None
        return cls(**json.loads(value))


# The companion files, in the folder STANDIN_COMPANIONS names (the load generator writes them,
# latency_replay_local.py Companions; the stand-in reads them, standin_engine.py CompanionFiles):
COMPANION_TIMELINE = "timeline.json"  # {"start": monotonic s, "companions": [[s after, tokens]]}
DECODE_REPLICAS = "decode.json"  # {"running": [replica ids]}, rewritten when Serve's change


def assigned(index: int, members: Sequence[str], me: str) -> bool:
    """Whether companion `index` is this decode replica's: one of the running decode replicas
    (`members`), by a hash of its index (a random split, as routing each request at random
    would make it; Serve's power-of-two choices would balance the replicas more)."""
    if me not in members:
        return False
    return zlib.crc32(str(index).encode()) % len(members) == sorted(members).index(me)


class CompanionFeed:
    """The replay's companions as one decode replica takes them: the timeline the load
    generator wrote when its load started (`start`, monotonic seconds; each companion's
    seconds after it and answer tokens), read up to now, the replica's share kept."""

    def __init__(self, start: float, timeline: Sequence[tuple[float, int]]) -> None:
        self.start = start
        self._timeline = timeline
        self._next = 0

    def due(self, now: float, members: Sequence[str], me: str) -> list[tuple[float, int]]:
        """(start, tokens) of this replica's companions that arrived since the last call."""
        mine = []
        while self._next < len(self._timeline):
            after, tokens = self._timeline[self._next]
            if self.start + after > now:
                break
            if assigned(self._next, members, me):
                mine.append((self.start + after, tokens))
            self._next += 1
        return mine


class Companions:
    """The companion sequences one decode replica runs beside its streams. Every running
    sequence advances one token per step, and a step takes `step_time(all running)`; so this
    counts decode steps (the clock) as time passes, piecewise at the step time of each stretch,
    and a companion of n tokens ends n steps after it starts (the simulation's clock,
    tools/latency_replay.py Replica). `others`, the replica's own streams, is taken as constant
    between two calls: they are made at every token of every stream."""

    def __init__(self, step_time: Callable[[int], float]) -> None:
        self._step_time = step_time
        self._due: list[tuple[float, int]] = []  # (start, tokens), soonest first
        self._ends: list[float] = []  # the clock at which each running companion ends
        self._clock = 0.0
        self._at: float | None = None

    def add(self, start: float, tokens: int) -> None:
        # While none runs, the clock may start from the earliest start (its value is arbitrary).
        if not self._ends and (self._at is None or start < self._at):
            self._at = start
        heapq.heappush(self._due, (start, tokens))

    def running(self, now: float, others: int) -> int:
        """The companions running at `now` (monotonic seconds)."""
        if self._at is None:
            self._at = now
        while self._due and self._due[0][0] <= now:
            start, tokens = heapq.heappop(self._due)
            self._advance(start, others)
            heapq.heappush(self._ends, self._clock + tokens)
        self._advance(now, others)
        return len(self._ends)

    def _advance(self, until: float, others: int) -> None:
        assert self._at is not None
        while self._at < until:
            step = self._step_time(others + len(self._ends))
            if self._ends:
                reached = self._at + (self._ends[0] - self._clock) * step
                if reached <= until:
                    self._clock, self._at = heapq.heappop(self._ends), reached
                    continue
            self._clock += (until - self._at) / step
            self._at = until
