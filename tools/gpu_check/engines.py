"""Stage 1: two real vLLM engines with the deployed engine arguments, and the P/D hand-off between
them driven the way Ray Serve LLM's decode server drives it (vLLM 0.26 NixlConnector protocol).

The protocol (vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py,
request_finished, v0.26.0): a request to prefill with ``kv_transfer_params.do_remote_decode``
and ``max_tokens: 1`` keeps its KV blocks and answers with ``kv_transfer_params`` naming them
(``remote_block_ids``, one list per KV cache group, the engine id, host and side-channel port);
the same request to decode with those parameters makes decode READ the blocks over NIXL and
continue from them. Decode's answer must then equal its own answer without a hand-off.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdctl.checks import Check
from tools.gpu_check.one_gpu import LOOPBACK, vllm_cli_args
from tools.gpu_check.tiny_model import WORDS, chat_prompt

ANSWER_TOKENS = 24
START_TIMEOUT_S = 480.0
# Each engine's NIXL side channel (vLLM's default 5600 for both would collide on one host).
SIDE_CHANNEL_PORTS = {"prefill": 5600, "decode": 5610}
HTTP_PORTS = {"prefill": 8100, "decode": 8200}


def engine_command(
    role: str, model_path: str, model_id: str, kwargs: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """vLLM's OpenAI server for one side on this host, and its environment: each side its own
    HTTP port and NIXL side channel, so two engines share one machine."""
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_path,
        "--served-model-name",
        model_id,
        "--host",
        LOOPBACK,
        "--port",
        str(HTTP_PORTS[role]),
        *vllm_cli_args(kwargs),
    ]
    role_env = {
        **env,
        "VLLM_NIXL_SIDE_CHANNEL_HOST": LOOPBACK,
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(SIDE_CHANNEL_PORTS[role]),
    }
    return command, role_env


def prompts(count: int, words: int = 420) -> list[str]:
    """Prompts of several KV blocks each (block_size 128 tokens), each with its own first words so
    that no prefix is shared between them and prefix caching cannot stand in for a transfer."""
    vocabulary = WORDS[:10]
    return [
        f"question {index} about {vocabulary[index % len(vocabulary)]}: "
        + " ".join(vocabulary[(index * 7 + step * 3) % len(vocabulary)] for step in range(words))
        for index in range(count)
    ]


@dataclass
class Engine:
    role: str
    process: subprocess.Popen[bytes]
    base: str

    def post(self, path: str, body: Mapping[str, Any] | None = None, timeout: float = 120) -> Any:
        data = json.dumps(body or {}).encode()
        request = urllib.request.Request(
            f"{self.base}{path}", data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
        return json.loads(text) if text.strip() else None

    def get(self, path: str, timeout: float = 30) -> str:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=timeout) as response:
            return response.read().decode()

    def complete(self, model: str, prompt: str, **extra: Any) -> dict[str, Any]:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": ANSWER_TOKENS,
            "temperature": 0,
            "ignore_eos": True,
            **extra,
        }
        return self.post("/v1/completions", body)

    def reset_prefix_cache(self) -> None:
        """So that a later answer is computed again, not read from blocks a transfer filled."""
        self.post("/reset_prefix_cache")


@contextmanager
def running(
    role: str,
    model_path: str,
    model_id: str,
    kwargs: Mapping[str, Any],
    env: Mapping[str, str],
    log: Path,
) -> Iterator[Engine]:
    command, role_env = engine_command(role, model_path, model_id, kwargs, env)
    process_env = {
        **os.environ,
        **role_env,
        "VLLM_SERVER_DEV_MODE": "1",  # /reset_prefix_cache
    }
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=process_env)
    engine = Engine(role, process, f"http://{LOOPBACK}:{HTTP_PORTS[role]}")
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{role} engine exited with {process.returncode}:\n{tail}")
            try:
                engine.get("/health", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    message = f"{role} engine not healthy in {START_TIMEOUT_S:.0f} s"
                    raise TimeoutError(message) from None
                time.sleep(2)
        yield engine
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def handoff(
    prefill: Engine, decode: Engine, model: str, prompt: str, permute: bool = False
) -> tuple[str, dict[str, Any]]:
    """One P/D request: prefill keeps the KV, decode READs it (block ids reversed within each
    group when ``permute``: the control that shows decode used the transferred blocks)."""
    first = prefill.complete(
        model,
        prompt,
        max_tokens=1,
        kv_transfer_params={
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        },
    )
    params = first.get("kv_transfer_params")
    if not params or not params.get("remote_block_ids"):
        raise AssertionError(f"prefill returned no kv_transfer_params: {first}")
    sent = copy.deepcopy(params)
    if permute:
        sent["remote_block_ids"] = [list(reversed(group)) for group in sent["remote_block_ids"]]
    answer = decode.complete(model, prompt, kv_transfer_params=sent)
    return answer["choices"][0]["text"], params


def nixl_transfers(metrics_text: str) -> tuple[float, float]:
    """(transfers, failed transfers) from vLLM's own /metrics (vllm:nixl_* families,
    vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py, v0.26.0)."""
    from prometheus_client.parser import text_string_to_metric_families

    transfers = failed = 0.0
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "vllm:nixl_xfer_time_seconds_count":
                transfers += sample.value
            elif sample.name == "vllm:nixl_num_failed_transfers_total":
                failed += sample.value
    return transfers, failed


def run(
    model_path: str,
    model_id: str,
    kwargs_by_role: Mapping[str, Mapping[str, Any]],
    env: Mapping[str, str],
    logs: Path,
    *,
    tolerance: float,
    texts: list[str],
    chat_texts: list[str],
) -> tuple[list[Check], dict[str, str], dict[str, str]]:
    """The stage's checks, and decode's local answers by prompt and by chat message (stage 2
    compares the Serve application's answers with them)."""
    checks: list[Check] = []
    controls = prompts(len(texts) + 3)[len(texts) :]

    # Prefill first: two engines profiling memory at once on one GPU can fail (seen on an H200:
    # Serve restarted the replica, which came up on its second try).
    def engine(role: str) -> contextlib.AbstractContextManager[Engine]:
        return running(role, model_path, model_id, kwargs_by_role[role], env, logs / f"{role}.log")

    with engine("prefill") as prefill, engine("decode") as decode:
        checks.append(Check("engines start with the deployed engine arguments", True, ""))
        local = {p: decode.complete(model_id, p)["choices"][0]["text"] for p in texts}
        chat = {
            text: decode.complete(model_id, chat_prompt(text))["choices"][0]["text"]
            for text in chat_texts
        }
        decode.reset_prefix_cache()

        answer, params = handoff(prefill, decode, model_id, texts[0])
        blocks = sum(len(group) for group in params["remote_block_ids"])
        checks.append(
            Check(
                "prefill (max_tokens 1, remote decode) returns kv_transfer_params",
                blocks > 0,
                f"{blocks} blocks from engine {params.get('remote_engine_id')}",
            )
        )
        sequential = {texts[0]: answer}
        sequential.update({p: handoff(prefill, decode, model_id, p)[0] for p in texts[1:]})
        checks.append(
            agreement(
                "sequential P/D answers equal decode's local answers",
                sequential,
                local,
                tolerance,
            )
        )

        decode.reset_prefix_cache()
        prefill.reset_prefix_cache()
        with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
            results = pool.map(lambda p: handoff(prefill, decode, model_id, p)[0], texts)
            concurrent_answers = dict(zip(texts, results, strict=True))
        checks.append(
            agreement(
                "concurrent P/D answers equal decode's local answers",
                concurrent_answers,
                local,
                tolerance,
            )
        )

        decode.reset_prefix_cache()
        control_local = {p: decode.complete(model_id, p)["choices"][0]["text"] for p in controls}
        decode.reset_prefix_cache()
        changed = 0
        for prompt in controls:
            permuted, _ = handoff(prefill, decode, model_id, prompt, permute=True)
            changed += permuted != control_local[prompt]
            decode.reset_prefix_cache()  # its cache now holds the permuted KV
        checks.append(
            Check(
                "permuted remote block ids change the answer (the KV came over NIXL)",
                changed == len(controls),
                f"{changed}/{len(controls)} answers changed",
            )
        )

        transfers, failed = nixl_transfers(decode.get("/metrics"))
        expected = 2 * len(texts) + len(controls)
        checks.append(
            Check(
                "decode's NIXL metrics count the transfers",
                transfers >= expected and failed == 0,
                f"vllm:nixl_xfer_time_seconds_count {transfers:g} (>= {expected} hand-offs), "
                f"failed {failed:g}",
            )
        )
    return checks, local, chat


def agreement(
    name: str, got: Mapping[str, str], want: Mapping[str, str], tolerance: float
) -> Check:
    """Equal answers; with a tolerance (MoE kernels are not deterministic even batch-invariant),
    the share of prompts whose answers differ may not exceed it."""
    differing = [prompt for prompt in got if got[prompt] != want[prompt]]
    share = len(differing) / len(got)
    detail = f"{len(got) - len(differing)}/{len(got)} equal"
    if tolerance:
        detail += f" (tolerance {tolerance:.0%} differing)"
    return Check(name, share <= tolerance, detail)
