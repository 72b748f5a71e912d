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

The figures themselves come from tools/latency_replay_scale.py (the fit, scaled for the local
run). Pure (no Ray, no project import): the stand-in imports it in every replica.
"""

from __future__ import annotations

import json
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
