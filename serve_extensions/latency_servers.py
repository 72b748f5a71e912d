"""Ray Serve LLM 2.58's P/D server classes, measuring each request's latency and reporting it
as the custom autoscaling metrics the latency policy reads (latency_autoscaler.py
LATENCY_METRIC, SAMPLES_METRIC), with the requests their engine holds (ENGINE_REQUESTS_METRIC,
the side's load). Without them Ray's servers report none, and the policy runs its queue
fallback on both sides, on Serve's requests in flight.

What Serve and Ray Serve LLM do, read from Ray 2.58.0 (the image's):
- serve/_private/replica.py: a deployment class with a `record_autoscaling_stats` method has
  custom metrics (UserCallableWrapper._user_autoscaling_stats); Serve calls it on the user code
  event loop (`_run_user_code`, the loop the request methods run on) every look_back_period_s x
  0.2, with a 10 s timeout (RAY_SERVE_RECORD_AUTOSCALING_STATS_TIMEOUT_S). Its first answer is
  checked: anything but a dict of int/float values disables custom metrics for the replica's
  life (`_fetch_custom_autoscaling_metrics`), so a side with no sample yet reports only the
  count, 0, never None.
- A deployment's `user_config` reaches `reconfigure(user_config)` before the replica serves
  (Replica.initialize_and_get_metadata -> call_reconfigure): the builder (pd_builder.py) hands
  each side its objective's percentile there.
- llm/_internal/serve/serving_patterns/prefill_decode/pd_server.py: PDPrefillServer is an
  LLMServer that decode calls (`prefill_server.options(stream=True)`) with a request clamped to
  one token, not streamed (engines/vllm/kv_transfer/base.py); its chat/completions return the
  engine's outputs. Its time to the first output is prefill's TTFT: the queue in the engine and
  the forward pass of the prompt (not the time the request waited in decode's handle before it
  reached the replica, nor the KV pull, nor decode's first step).
- PDDecodeServer runs decode through LLMServer.chat/completions, whose `_run_request` hands a
  streamed response's engine outputs to `_batch_output_stream` (core/server/llm_server.py) before
  Ray batches them by stream_batching_interval_ms: the outputs are timed there, one by one, as
  the engine makes them. Only streamed answers give ITL samples (a non-streamed answer arrives
  whole); a decode side that serves none reports no latency and stays on the queue rule.
- DPPDPrefillServer / DPPDDecodeServer (data parallel > 1) are the same classes with DPServer
  mixed in: each rank is a replica and measures its own requests.
- The engine's requests (`engine_requests`), read where vLLM keeps them: LLMServer.engine is
  Ray's VLLMEngine, whose `_engine_client` is the vLLM AsyncLLM it started in the replica's own
  process (engines/vllm/vllm_engine.py _start_async_llm_engine, Ray 2.58.0). vLLM 0.26.0's
  AsyncLLM.output_processor (v1/engine/async_llm.py) keeps a RequestState per request from
  add_request (a generate's start) until it finishes or is aborted (v1/engine/output_processor.py
  `request_states`; a parallel-sampling request's children each have one), and
  `get_num_unfinished_requests()` is its length: every request the engine holds, running or
  waiting in its scheduler (on decode, waiting for its KV too), streamed or not. A dict's
  length, read in the replica's process: no engine round trip, and one bytecode under the GIL
  whichever thread runs vLLM's output handler. The
  scheduler's own running/waiting split (SchedulerStats) reaches only the stat loggers; the
  count above is the engine's load as the policy needs it (prefill's queue is its waiting
  requests). It supersedes counting at `_batch_output_stream`, which non-streamed answers
  bypass (LLMServer._run_request): the engine sees every request, and the stand-in engine of
  the local tier answers the same path (tests/e2e/standin_engine.py).

Every replica keeps its own window (latency_window.py): no state is shared across replicas,
and nothing blocks the event loop (an append per request or per output, a sort per report).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ray.llm._internal.serve.core.configs.openai_api_models import ErrorResponse
from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import (
    DPPDDecodeServer,
    DPPDPrefillServer,
    PDDecodeServer,
    PDPrefillServer,
)
from ray.serve.config import AutoscalingConfig

from serve_extensions.latency_autoscaler import (
    ENGINE_REQUESTS_METRIC,
    LATENCY_METRIC,
    SAMPLES_METRIC,
)
from serve_extensions.latency_window import LatencyWindow, StreamClock

# The user_config key with the side's objective percentile (pd_builder.py sets it).
PERCENTILE_KEY = "latency_percentile"
# vLLM's closing server-sent event (vllm/entrypoints/openai serving_chat / serving_completion):
# not an output of the engine.
STREAM_DONE = "data: [DONE]\n\n"


class _LatencyReporting:
    """The window, its configuration and the report, common to both sides."""

    side: str
    _llm_config: Any  # LLMServer's
    _pd_latency: LatencyWindow | None = None

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        self._pd_latency = LatencyWindow(self._look_back_s(), float(user_config[PERCENTILE_KEY]))

    def _look_back_s(self) -> float:
        """The side's look_back_period_s, as its Serve deployment has it (Ray's default when the
        configuration leaves it out): the window the controller averages reports over."""
        autoscaling = (self._llm_config.deployment_config or {}).get("autoscaling_config") or {}
        value = autoscaling.get("look_back_period_s")
        return float(value or AutoscalingConfig.model_fields["look_back_period_s"].default)

    def _observe(self, latency_s: float) -> None:
        if self._pd_latency is not None:
            self._pd_latency.add(latency_s)

    async def record_autoscaling_stats(self) -> dict[str, float]:
        stats: dict[str, float] = {SAMPLES_METRIC: 0}
        if self._pd_latency is not None:
            value, stats[SAMPLES_METRIC] = self._pd_latency.report()
            if value is not None:
                stats[LATENCY_METRIC[self.side]] = value
        requests = engine_requests(getattr(self, "engine", None))
        if requests is not None:
            stats[ENGINE_REQUESTS_METRIC] = requests
        return stats


def engine_requests(engine: Any) -> int | None:
    """The requests the replica's vLLM engine holds (module docstring); None before the engine
    has started, or for an engine without vLLM's client (the policy then reads Serve's count)."""
    client = getattr(engine, "_engine_client", None)
    processor = getattr(client, "output_processor", None)
    if processor is None:
        return None
    return int(processor.get_num_unfinished_requests())


async def _close(outputs: AsyncIterator[Any]) -> None:
    """Close the server's generator with ours (a client gone: vLLM aborts the request)."""
    close = getattr(outputs, "aclose", None)
    if close is not None:
        await close()


class _PrefillTiming(_LatencyReporting):
    side = "prefill"

    async def chat(self, request: Any, raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        started = time.monotonic()
        return self._time_to_first(await super().chat(request, raw_request_info), started)

    async def completions(
        self, request: Any, raw_request_info: Any = None
    ) -> AsyncGenerator[Any, None]:
        started = time.monotonic()
        return self._time_to_first(await super().completions(request, raw_request_info), started)

    async def _time_to_first(
        self, outputs: AsyncIterator[Any], started: float
    ) -> AsyncGenerator[Any, None]:
        first = True
        try:
            async for item in outputs:
                if first:
                    first = False
                    if not isinstance(item, ErrorResponse):
                        self._observe(time.monotonic() - started)
                yield item
        finally:
            await _close(outputs)


class _DecodeTiming(_LatencyReporting):
    side = "decode"

    def _batch_output_stream(self, generator: AsyncGenerator[Any, None]) -> Any:
        return super()._batch_output_stream(self._inter_token(generator))

    async def _inter_token(self, outputs: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
        clock, failed = StreamClock(), False
        try:
            async for item in outputs:
                if isinstance(item, str):
                    if item != STREAM_DONE:
                        clock.tick()
                else:  # an ErrorResponse in the stream: not a latency of serving
                    failed = True
                yield item
        finally:
            inter_token = clock.inter_token_s()
            if inter_token is not None and not failed:
                self._observe(inter_token)
            await _close(outputs)


class LatencyPDPrefillServer(_PrefillTiming, PDPrefillServer):
    pass


class LatencyDPPDPrefillServer(_PrefillTiming, DPPDPrefillServer):
    pass


class LatencyPDDecodeServer(_DecodeTiming, PDDecodeServer):
    pass


class LatencyDPPDDecodeServer(_DecodeTiming, DPPDDecodeServer):
    pass


# Ray's class the P/D builder picks -> ours (pd_builder.py swaps them), with the side it serves.
MEASURED: dict[type, tuple[str, type]] = {
    PDPrefillServer: ("prefill", LatencyPDPrefillServer),
    DPPDPrefillServer: ("prefill", LatencyDPPDPrefillServer),
    PDDecodeServer: ("decode", LatencyPDDecodeServer),
    DPPDDecodeServer: ("decode", LatencyDPPDDecodeServer),
}
