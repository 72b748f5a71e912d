"""A CPU-only stand-in for Ray Serve LLM's ``VLLMEngine`` (Ray 2.58.0), for the end-to-end tier.

Every replica loads it through ``RAYLLM_VLLM_ENGINE_CLS=standin_engine.StandinEngine`` (read by
``LLMServer._get_default_engine_class`` in ray/llm/_internal/serve/core/server/llm_server.py), so
everything around the engine is Ray's own: the OpenAI ingress, the P/D decode server that calls
prefill and hands over ``kv_transfer_params``, Serve's proxies, health checks and metrics.

Nothing is downloaded: no tokenizer, chat template or weights. Prompts are "tokenized" by
whitespace; output tokens are words picked from a hash of the prompt, so a response is
reproducible from its prompt.

Data parallel (``engine_kwargs.data_parallel_size`` > 1, Ray's DPPDPrefillServer/DPPDDecodeServer):
each rank is one Serve replica of a gang; Ray's DPServer adds ``data_parallel_rank``,
``data_parallel_address`` and ``data_parallel_rpc_port`` to the engine kwargs and sets
``VLLM_RAY_BUNDLE_INDICES`` before the engine starts. The stand-in builds vLLM's own
``AsyncEngineArgs`` and ``ParallelConfig`` from them as vLLM's ``create_engine_config`` does
(data_parallel.py), so an argument vLLM would refuse fails the replica here too, and records its
rank, gang and bundles (with the node of each) for the tests.

P/D as vLLM's NixlConnector does it (pull mode, vllm .../kv_connector/v1/nixl/):
  * prefill gets ``kv_transfer_params`` with ``do_remote_decode`` (Ray clamps the request to one
    token, not streamed) and returns one token and the params naming its blocks, engine id and
    NIXL side channel (set by Ray's ``NixlConnectorBackend.setup()``);
  * decode gets those params (``do_remote_prefill``), "pulls" the blocks (observes
    ``vllm:nixl_xfer_time_seconds``, or counts ``vllm:nixl_num_failed_transfers`` while transfers
    are told to fail) and generates ``max_tokens`` tokens.

Prefix caching as vLLM 0.26 counts it (``PrefixCache``): every replica keeps the whole blocks of
the prompts it saw, keyed by their whole prefix; a new request's hit is the longest run of them
among its first n - 1 tokens (vllm/v1/core/kv_cache_manager.py ``get_computed_blocks``), counted
in ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` (vllm/v1/metrics/loggers.py). On
both sides: decode consults its own cache before pulling and reads only the blocks after its hit
(nixl/pull_scheduler.py ``get_num_new_matched_tokens``, base_worker.py ``_apply_prefix_caching``).

The requests the engine holds, where Ray's VLLMEngine has vLLM's (``engine._engine_client``, an
AsyncLLM, set by ``start()``; ``.output_processor.get_num_unfinished_requests()``, the length of
its ``request_states``: vLLM 0.26.0 v1/engine/output_processor.py): the app's latency servers
read that path for their load metric (serve_extensions/latency_servers.py ``engine_requests``),
so the stand-in has the same objects (``StandinEngineClient``): a state per request from its
generate's start to its end (prefill's queue included), and under the latency model decode's
running companions, sequences the engine holds as a real one holds the requests they stand for.

Environment (set by the harness for the whole local Ray cluster):
  STANDIN_RECORDS         a JSON line per engine start and per request is appended here, and
                          one per request when its first output leaves the engine (prefill's
                          one token, decode's first chunk): the engine's own timestamps, which
                          the orchestration bench's TTFT breakdown reads
  STANDIN_NIXL_FAIL_FILE  transfers fail while this file exists
  STANDIN_TOKEN_DELAY_S   time per output token (default 0.005); 0 makes the engine cost nothing
                          (no token time, no transfer time), for the orchestration bench
  STANDIN_PREFILL_S_PER_PROMPT_TOKEN
                          prefill's time per prompt token (default 0): long prompts load
                          prefill and not decode, as they do on GPUs
  STANDIN_LATENCY_MODEL   a JSON object (latency_model.py EngineLatency) that replaces the three
                          above with a model of a real engine's latency under load: the engine
                          start takes `start_s` of its side; prefill is one FIFO server (a
                          prompt waits for the prompts before it); decode's step grows with the
                          sequences it runs (its streams, and its companions: latency_model.py);
                          the KV pull takes its time per prompt token. The latency-policy
                          replay sets it (latency_replay_local.py)
  STANDIN_COMPANIONS      under the latency model, the folder of the replay's companion files
                          (COMPANION_TIMELINE, DECODE_REPLICAS): decode runs its share of them
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import math
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import ray
from data_parallel import data_parallel_record
from latency_model import (
    COMPANION_TIMELINE,
    DECODE_REPLICAS,
    CompanionFeed,
    Companions,
    EngineLatency,
)
from ray import serve
from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionResponse,
    CompletionResponse,
    ErrorInfo,
    ErrorResponse,
)
from ray.llm._internal.serve.core.engine.protocol import LLMEngine
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionResponseChoice,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
)
from vllm.entrypoints.openai.completion.protocol import (
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
)
from vllm.entrypoints.openai.engine.protocol import DeltaMessage, UsageInfo
from vllm.v1.metrics.ray_wrappers import RayCounterWrapper, RayGaugeWrapper, RayHistogramWrapper

# The stand-in's whole output vocabulary (offline_tokenizer.py builds a tokenizer of it).
WORDS = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
)  # fmt: skip
DEFAULT_MAX_TOKENS = 16
TOKEN_DELAY_S = float(os.environ.get("STANDIN_TOKEN_DELAY_S", "0.005"))
PREFILL_S_PER_PROMPT_TOKEN = float(os.environ.get("STANDIN_PREFILL_S_PER_PROMPT_TOKEN", "0"))
LATENCY_MODEL = EngineLatency.from_env(os.environ.get("STANDIN_LATENCY_MODEL"))
COMPANIONS_DIR = os.environ.get("STANDIN_COMPANIONS", "")
COMPANION_FILES_CHECK_S = 0.2
# vLLM's NixlPromMetrics buckets (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py).
NIXL_XFER_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]


# Blocks a replica's prefix cache keeps, least recently used out (a GPU's KV cache is bounded too).
PREFIX_CACHE_BLOCKS = 4096


class PrefixCache:
    """One engine's prefix cache, whole blocks of whitespace tokens keyed by their whole prefix
    (vLLM's block hashes chain each block to its parent's)."""

    def __init__(self, block_size: int, capacity: int = PREFIX_CACHE_BLOCKS) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: OrderedDict[str, None] = OrderedDict()

    def _keys(self, tokens: list[str]) -> list[str]:
        digest, keys = hashlib.sha256(), []
        for end in range(self.block_size, len(tokens) + 1, self.block_size):
            digest.update("\x00".join(tokens[end - self.block_size : end]).encode() + b"\x01")
            keys.append(digest.copy().hexdigest())
        return keys

    def lookup_and_fill(self, tokens: list[str]) -> int:
        """The tokens a new request finds cached (whole blocks of its first n - 1 tokens: the
        last is computed again for its logits); then its whole blocks are cached."""
        keys = self._keys(tokens)
        hit = 0
        for key in keys[: (len(tokens) - 1) // self.block_size]:
            if key not in self._blocks:
                break
            hit += 1
        for key in keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
        return hit * self.block_size


def record(event: dict[str, Any]) -> None:
    """One JSON line per event; replicas on every node append to the same file, hence the lock."""
    path = os.environ.get("STANDIN_RECORDS")
    if not path:
        return
    line = json.dumps(event, sort_keys=True, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.write(line)
        file.flush()
        fcntl.flock(file, fcntl.LOCK_UN)


def transfers_fail() -> bool:
    flag = os.environ.get("STANDIN_NIXL_FAIL_FILE")
    return bool(flag) and os.path.exists(flag)


def error(message: str, code: int = 400, kind: str = "BadRequestError") -> ErrorResponse:
    return ErrorResponse(error=ErrorInfo(message=message, type=kind, code=code))


def content_text(content: Any) -> str:
    """A chat message's text: a string, or the text parts of OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(
        part.get("text", "")
        for part in content
        if isinstance(part, dict) and part.get("type") == "text"
    )


class EngineMetrics:
    """The vLLM series the project's dashboard and alerts read, made through vLLM's own Ray
    wrappers (the ones ``RayPrometheusStatLogger`` uses), so names and labels go through the same
    renaming: ``vllm:x`` -> ``vllm_x`` (ray_wrappers) -> ``ray_vllm_x`` (Ray's exporter)."""

    def __init__(self, model_name: str) -> None:
        names = ["model_name", "engine"]
        values = [model_name, "0"]

        def histogram(name: str, doc: str, buckets: list[float]) -> Any:
            return RayHistogramWrapper(name, doc, names, buckets).labels(*values)

        def gauge(name: str, doc: str) -> Any:
            made = RayGaugeWrapper(name, doc, names).labels(*values)
            made.set(0)
            return made

        self.nixl_xfer_time = histogram(
            "vllm:nixl_xfer_time_seconds",
            "Histogram of transfer duration for NIXL KV Cache transfers.",
            NIXL_XFER_BUCKETS,
        )
        self.nixl_failed = RayCounterWrapper(
            "vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers.", names
        ).labels(*values)
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token.",
            LATENCY_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency.", LATENCY_BUCKETS
        )
        self.running = gauge("vllm:num_requests_running", "Requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent.")
        # Incremented by 0 too, as vLLM does: Ray's wrapper skips it, so a series exists from
        # its first non-zero count (ray_wrappers.py RayCounterWrapper.inc).
        self.prefix_queries = RayCounterWrapper(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            names,
        ).labels(*values)
        self.prefix_hits = RayCounterWrapper(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            names,
        ).labels(*values)

    def in_flight(self, count: int) -> None:
        """vLLM sets every scheduler gauge on each stats record; so does the stand-in."""
        self.running.set(count)
        self.waiting.set(0)
        self.kv_usage.set(min(1.0, 0.01 * count))


class CompanionFiles:
    """The load generator's companion files (STANDIN_COMPANIONS), read again at most every
    COMPANION_FILES_CHECK_S: the timeline once it is there, the running decode replicas when
    they change. Both are written whole and renamed into place."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.feed: CompanionFeed | None = None
        self.members: list[str] = []
        self._checked = -math.inf
        self._members_mtime: float | None = None

    def due(self, now: float, me: str) -> list[tuple[float, int]]:
        if now - self._checked >= COMPANION_FILES_CHECK_S:
            self._checked = now
            self._refresh()
        return self.feed.due(now, self.members, me) if self.feed else []

    def _refresh(self) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if self.feed is None:
                timeline = json.loads((self.folder / COMPANION_TIMELINE).read_text())
                pairs = [(float(t), int(n)) for t, n in timeline["companions"]]
                self.feed = CompanionFeed(float(timeline["start"]), pairs)
            path = self.folder / DECODE_REPLICAS
            mtime = path.stat().st_mtime
            if mtime != self._members_mtime:
                self.members = list(json.loads(path.read_text())["running"])
                self._members_mtime = mtime


class StandinOutputProcessor:
    """vLLM's OutputProcessor as far as the app's servers read it: `request_states`, one entry
    per request the engine holds, and their count with the companions the engine runs."""

    def __init__(self, companions_running: Callable[[], int]) -> None:
        self.request_states: dict[str, float] = {}
        self._companions_running = companions_running

    def get_num_unfinished_requests(self) -> int:
        return len(self.request_states) + self._companions_running()


class StandinEngineClient:
    """vLLM's AsyncLLM as far as the app's servers read it (its `output_processor`)."""

    def __init__(self, output_processor: StandinOutputProcessor) -> None:
        self.output_processor = output_processor


class StandinEngine(LLMEngine):
    """Ray Serve LLM's engine interface, answered without CUDA."""

    def __init__(self, llm_config: LLMConfig) -> None:
        self.llm_config = llm_config
        # As VLLMEngine.__init__: the KV-connector backend's setup(). PDDecodeServer reads
        # llm_config.kv_connector_backend to shape the prefill and decode requests; for
        # NixlConnector it also sets VLLM_NIXL_SIDE_CHANNEL_HOST/PORT and a unique engine_id.
        llm_config.setup_engine_backend()
        # As VLLMEngine.start() (_prepare_engine_config): Ray's check of engine_kwargs.
        engine_config = llm_config.get_engine_config()
        # vLLM's own checks of the parallel arguments (None without data parallelism).
        self.data_parallel = data_parallel_record(engine_config)
        self._running = False
        self._in_flight = 0
        self._next_block = 0
        self._metrics: EngineMetrics | None = None
        # Prefill under the latency model: one prompt at a time, in arrival order (asyncio.Lock
        # wakes its waiters first in, first out).
        self._prefill_queue = asyncio.Lock()
        # Decode under the latency model: the sequences the replay thinned away, run beside
        # the streams (latency_model.py Companions), read from STANDIN_COMPANIONS (start()).
        self._companions: Companions | None = None
        self._companion_files: CompanionFiles | None = None
        # As VLLMEngine: None until start() has made the engine.
        self._engine_client: StandinEngineClient | None = None

    async def start(self) -> None:
        if self._running:
            return
        context = serve.get_replica_context()
        self.deployment = context.deployment
        self.replica_id = context.replica_id.unique_id
        self.role = "prefill" if self.deployment.lower().startswith("prefill") else "decode"
        if LATENCY_MODEL is not None and self.role == "decode":
            self._companions = Companions(LATENCY_MODEL.step_time)
            if COMPANIONS_DIR:
                self._companion_files = CompanionFiles(Path(COMPANIONS_DIR))
        if LATENCY_MODEL is not None:  # the real engine's load time, as the model has it
            await asyncio.sleep(LATENCY_MODEL.start_s.get(self.role, 0.0))
        self.node_id = ray.get_runtime_context().get_node_id()
        engine_kwargs = self.llm_config.engine_kwargs
        self.engine_id = (engine_kwargs.get("kv_transfer_config") or {}).get("engine_id")
        self.block_size = int(engine_kwargs.get("block_size", 16))
        self.max_model_len = int(engine_kwargs.get("max_model_len", 4096))
        self.tp_size = int(engine_kwargs.get("tensor_parallel_size", 1))
        self.prefix_cache = PrefixCache(self.block_size)
        if self.llm_config.log_engine_metrics:
            self._metrics = EngineMetrics(self.llm_config.model_id)
        self._engine_client = StandinEngineClient(
            StandinOutputProcessor(lambda: self._companions_running(time.monotonic()))
        )
        self._running = True
        record(
            {
                "event": "start",
                "role": self.role,
                "deployment": self.deployment,
                "replica": self.replica_id,
                "node_id": self.node_id,
                "pid": os.getpid(),
                "engine_id": self.engine_id,
                "engine_kwargs": engine_kwargs,
                "data_parallel": self.data_parallel,
                "side_channel": [
                    os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST"),
                    os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT"),
                ],
                "time": time.time(),
            }
        )

    async def check_health(self) -> None:
        if not self._running:
            raise RuntimeError("stand-in engine not started")

    def routing_stats(self) -> dict:
        return {}

    async def resolve_lora(self, lora_model: Any) -> None:
        raise ValueError("LoRA is not supported by the stand-in engine")

    async def reset_prefix_cache(self) -> None:
        return None

    async def chat(self, request: Any, raw_request_info: Any = None) -> AsyncGenerator[Any, None]:
        prompt = "\n".join(
            f"{message.get('role')}: {content_text(message.get('content'))}"
            for message in request.messages
        )
        max_tokens = request.max_completion_tokens or request.max_tokens
        async for item in self._generate("chat", request, f"{prompt}\nassistant:", max_tokens):
            yield item

    async def completions(
        self, request: Any, raw_request_info: Any = None
    ) -> AsyncGenerator[Any, None]:
        prompt = request.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1 or not isinstance(prompt[0], str):
                yield error("The stand-in engine takes one text prompt per request.")
                return
            prompt = prompt[0]
        async for item in self._generate("completions", request, prompt, request.max_tokens):
            yield item

    async def embeddings(
        self, request: Any, raw_request_info: Any = None
    ) -> AsyncGenerator[Any, None]:
        yield error("Embeddings are not supported by the stand-in engine.")

    async def transcriptions(
        self, request: Any, raw_request_info: Any = None
    ) -> AsyncGenerator[Any, None]:
        yield error("Transcriptions are not supported by the stand-in engine.")

    @staticmethod
    def tokens(prompt: str, count: int) -> list[str]:
        return [
            " " + WORDS[hashlib.sha256(f"{prompt}|{index}".encode()).digest()[0] % len(WORDS)]
            for index in range(count)
        ]

    def _refusal(self, prompt: str, prompt_tokens: int, n_out: int) -> str | None:
        """vLLM's request checks the tests exercise, with vLLM's messages."""
        if not prompt.strip():
            return "The prompt is empty."
        if n_out < 1:  # SamplingParams._verify_args, a 400 from vLLM's serving layer
            return f"max_tokens must be at least 1, got {n_out}."
        if prompt_tokens + n_out > self.max_model_len:
            return (
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {n_out} output tokens and your prompt contains {prompt_tokens} "
                f"input tokens, for a total of {prompt_tokens + n_out} tokens."
            )
        return None

    def _prefill_params(self, request_id: str, prompt_tokens: int) -> dict[str, Any]:
        """What vLLM's NixlConnector returns from prefill (pull_scheduler.py request_finished)."""
        n_blocks = -(-prompt_tokens // self.block_size)
        blocks = list(range(self._next_block, self._next_block + n_blocks))
        self._next_block += n_blocks
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [blocks],
            "remote_engine_id": self.engine_id,
            "remote_request_id": request_id,
            "remote_host": os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST"),
            "remote_port": int(os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "0")),
            "tp_size": self.tp_size,
            "remote_num_tokens": prompt_tokens,
            "remote_blocks_expiry_time": None,
        }

    async def _pull_blocks(self, kv_in: dict[str, Any], cached_blocks: int = 0) -> bool:
        """Decode's NIXL READ of the prefill blocks after the ones it holds itself; True when
        it failed."""
        n_blocks = sum(len(group) for group in kv_in.get("remote_block_ids") or [])
        n_blocks = max(0, n_blocks - cached_blocks)
        if LATENCY_MODEL is not None:
            seconds = LATENCY_MODEL.handoff_time(n_blocks * self.block_size)
        else:
            seconds = 0.004 + 0.001 * n_blocks if TOKEN_DELAY_S else 0.0  # zero-cost: no wait
        await asyncio.sleep(seconds)
        failed = transfers_fail()
        if self._metrics:
            if failed:
                self._metrics.nixl_failed.inc(1)
            else:
                self._metrics.nixl_xfer_time.observe(seconds)
        return failed

    async def _generate(
        self, kind: str, request: Any, prompt: str, max_tokens: int | None
    ) -> AsyncGenerator[Any, None]:
        """The request, held in the engine's request states from its start to its end (vLLM's
        add_request to its finish or abort)."""
        states = self._engine_client.output_processor.request_states if self._engine_client else {}
        key = uuid.uuid4().hex
        states[key] = time.monotonic()
        try:
            async for item in self._serve(kind, request, prompt, max_tokens):
                yield item
        finally:
            states.pop(key, None)

    async def _serve(
        self, kind: str, request: Any, prompt: str, max_tokens: int | None
    ) -> AsyncGenerator[Any, None]:
        started = time.perf_counter()
        kv_in = getattr(request, "kv_transfer_params", None) or {}
        phase = (
            "prefill"
            if kv_in.get("do_remote_decode")
            else "decode"
            if kv_in.get("do_remote_prefill")
            else "local"
        )
        prompt_tokens = max(1, len(prompt.split()))
        n_out = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        event: dict[str, Any] = {
            "event": "request",
            "kind": kind,
            "phase": phase,
            "role": self.role,
            "deployment": self.deployment,
            "replica": self.replica_id,
            "node_id": self.node_id,
            "dp_rank": (self.data_parallel or {}).get("rank"),
            "request_id": getattr(request, "request_id", None),
            "model": request.model,
            "prompt": prompt,
            "stream": bool(getattr(request, "stream", False)),
            "max_tokens": getattr(request, "max_tokens", None),
            "max_completion_tokens": getattr(request, "max_completion_tokens", None),
            "kv_transfer_params": getattr(request, "kv_transfer_params", None),
            "time_start": time.time(),
        }
        refusal = self._refusal(prompt, prompt_tokens, n_out)
        if refusal:
            record({**event, "error": refusal})
            yield error(refusal)
            return
        kv_out = None
        transfer_failed = None
        cached = self.prefix_cache.lookup_and_fill(prompt.split())
        event["prefix_cache_hit_tokens"] = cached
        if self._metrics:
            self._metrics.prefix_queries.inc(prompt_tokens)
            self._metrics.prefix_hits.inc(cached)
        if phase == "prefill":
            n_out = 1
            kv_out = self._prefill_params(event["request_id"], prompt_tokens)
            if LATENCY_MODEL is not None:
                async with self._prefill_queue:
                    await asyncio.sleep(LATENCY_MODEL.prefill_time(prompt_tokens))
            else:
                await asyncio.sleep(PREFILL_S_PER_PROMPT_TOKEN * prompt_tokens)
        elif phase == "decode":
            transfer_failed = await self._pull_blocks(kv_in, cached // self.block_size)
        tokens = self.tokens(prompt, n_out)
        text = "".join(tokens)
        usage = UsageInfo(
            prompt_tokens=prompt_tokens,
            completion_tokens=len(tokens),
            total_tokens=prompt_tokens + len(tokens),
        )
        record(
            {
                **event,
                "kv_transfer_params_out": kv_out,
                "output_text": text,
                "n_out": len(tokens),
                "transfer_failed": transfer_failed,
            }
        )
        self._in_flight += 1
        if self._metrics:
            self._metrics.in_flight(self._in_flight)
        try:
            request_id = event["request_id"] or uuid.uuid4().hex
            output = {"event": "output", "phase": phase, "request_id": event["request_id"]}
            if event["stream"]:
                first = True
                async for chunk in self._stream(kind, request, request_id, tokens, usage, started):
                    if first:
                        first = False
                        record({**output, "time_first_output": time.time()})
                    yield chunk
            else:
                await asyncio.sleep(sum(self._token_delay() for _ in tokens))
                if self._metrics:
                    self._metrics.ttft.observe(time.perf_counter() - started)
                record({**output, "time_first_output": time.time()})
                yield self._response(kind, request, request_id, text, usage, kv_out)
        finally:
            self._in_flight -= 1
            if self._metrics:
                self._metrics.in_flight(self._in_flight)

    def _token_delay(self) -> float:
        """One decode step: fixed, or under the latency model longer with each sequence the
        engine runs (the requests it is generating for now, this one included, and the
        companions running beside them)."""
        if LATENCY_MODEL is None:
            return TOKEN_DELAY_S
        return LATENCY_MODEL.step_time(self._in_flight + self._companions_running(time.monotonic()))

    def _companions_running(self, now: float) -> int:
        """Decode's companions running at `now`, those due since the last call taken first (0
        without companions)."""
        if self._companions is None:
            return 0
        if self._companion_files is not None:
            for start, tokens in self._companion_files.due(now, self.replica_id):
                self._companions.add(start, tokens)
        return self._companions.running(now, self._in_flight)

    @staticmethod
    def _response(
        kind: str,
        request: Any,
        request_id: str,
        text: str,
        usage: UsageInfo,
        kv_out: dict[str, Any] | None,
    ) -> ChatCompletionResponse | CompletionResponse:
        """Ray's response classes: anything else the ingress would treat as a stream."""
        if kind == "chat":
            return ChatCompletionResponse(
                id=f"chatcmpl-{request_id}",
                created=int(time.time()),
                model=request.model,
                choices=[
                    ChatCompletionResponseChoice(
                        index=0,
                        message=ChatMessage(role="assistant", content=text),
                        finish_reason="length",
                    )
                ],
                usage=usage,
                kv_transfer_params=kv_out,
            )
        return CompletionResponse(
            id=f"cmpl-{request_id}",
            created=int(time.time()),
            model=request.model,
            choices=[CompletionResponseChoice(index=0, text=text, finish_reason="length")],
            usage=usage,
            kv_transfer_params=kv_out,
        )

    async def _stream(
        self,
        kind: str,
        request: Any,
        request_id: str,
        tokens: list[str],
        usage: UsageInfo,
        started: float,
    ) -> AsyncGenerator[str, None]:
        """Server-sent events as vLLM's serving classes yield them
        (``model_dump_json(exclude_unset=True)``); ``object`` is set explicitly, else
        exclude_unset drops it from every chunk."""
        options = getattr(request, "stream_options", None)
        include_usage = bool(options and options.include_usage)
        created = int(time.time())
        chat = kind == "chat"
        chunk_id = f"chatcmpl-{request_id}" if chat else f"cmpl-{request_id}"
        obj = "chat.completion.chunk" if chat else "text_completion"

        def sse(payload: Any) -> str:
            return f"data: {payload.model_dump_json(exclude_unset=True)}\n\n"

        def chunk(token: str | None, finish: str | None) -> Any:
            if chat:
                delta = (
                    DeltaMessage(role="assistant", content="")
                    if token is None
                    else DeltaMessage(content=token)
                )
                choice = ChatCompletionResponseStreamChoice(
                    index=0, delta=delta, logprobs=None, finish_reason=finish
                )
                return ChatCompletionStreamResponse(
                    id=chunk_id, object=obj, created=created, model=request.model, choices=[choice]
                )
            choice = CompletionResponseStreamChoice(
                index=0, text=token or "", logprobs=None, finish_reason=finish
            )
            return CompletionStreamResponse(
                id=chunk_id, object=obj, created=created, model=request.model, choices=[choice]
            )

        if chat:
            yield sse(chunk(None, None))
        last = started
        for index, token in enumerate(tokens):
            await asyncio.sleep(self._token_delay())
            now = time.perf_counter()
            if self._metrics:
                (self._metrics.ttft if index == 0 else self._metrics.itl).observe(now - last)
            last = now
            yield sse(chunk(token, "length" if index == len(tokens) - 1 else None))
        if include_usage:
            response = ChatCompletionStreamResponse if chat else CompletionStreamResponse
            yield sse(
                response(
                    id=chunk_id,
                    object=obj,
                    created=created,
                    model=request.model,
                    choices=[],
                    usage=usage,
                )
            )
        yield "data: [DONE]\n\n"
