"""`vllm bench serve`, run from the Ray LLM image as a Kubernetes Job next to the endpoint, and
its saved result parsed into the figures operators compare (TTFT, ITL, TPOT, throughput)."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from typing import Any

from pdctl.checks import Check, failed, passed
from serving_manifests.names import BENCH_LABELS

RESULT_BEGIN = "=== pdctl result begin ==="
RESULT_END = "=== pdctl result end ==="
RESULT_FILE = "/tmp/pdctl/result.json"
PERCENTILES = "50,90,99"


@dataclass(frozen=True)
class BenchParameters:
    base_url: str
    model: str
    input_tokens: int = 1024
    output_tokens: int = 256
    concurrency: int = 16
    prompts: int = 200


def bench_command(parameters: BenchParameters) -> list[str]:
    return [
        "vllm",
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        parameters.base_url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        parameters.model,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(parameters.input_tokens),
        "--random-output-len",
        str(parameters.output_tokens),
        "--max-concurrency",
        str(parameters.concurrency),
        "--num-prompts",
        str(parameters.prompts),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        PERCENTILES,
        "--save-result",
        "--result-dir",
        "/tmp/pdctl",
        "--result-filename",
        "result.json",
    ]


def job_manifest(name: str, namespace: str, image: str, parameters: BenchParameters) -> dict:
    """The Job prints the result file between markers, so pdctl reads it from the logs."""
    script = (
        f"{shlex.join(bench_command(parameters))} && echo {shlex.quote(RESULT_BEGIN)} && "
        f"cat {RESULT_FILE} && echo && echo {shlex.quote(RESULT_END)}"
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "pdctl-bench"},
        },
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": dict(BENCH_LABELS)},  # network policy allow-pdctl-bench
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"llm-serving/role": "system"},
                    "containers": [
                        {
                            "name": "bench",
                            "image": image,
                            "command": ["bash", "-c", script],
                            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}},
                        }
                    ],
                },
            },
        },
    }


class BenchResultError(ValueError):
    """The Job's output holds no result pdctl can read; one line saying what is wrong."""


def result_from_logs(logs: str) -> dict[str, Any]:
    """The JSON between the markers of the last run in the logs. vLLM writes it with Python's
    json.dump, which spells a mean over no requests NaN: accepted here, judged by summarize."""
    _, found_begin, rest = logs.rpartition(RESULT_BEGIN)
    body, found, _ = rest.partition(RESULT_END)
    if not found_begin or not found:
        raise BenchResultError("the bench Job's logs hold no result (did `vllm bench serve` fail?)")
    try:
        result = json.loads(body)
    except RecursionError:
        raise BenchResultError("the bench result is JSON nested too deeply") from None
    except ValueError as error:
        raise BenchResultError(f"the bench result is not JSON ({error})") from None
    if not isinstance(result, dict):
        raise BenchResultError("the bench result is not a JSON object")
    return result


@dataclass(frozen=True)
class BenchSummary:
    completed: int
    failed: int
    duration_s: float
    request_throughput: float
    output_throughput: float
    latencies_ms: dict[str, dict[str, float]]  # metric -> {mean, median, p50, p90, p99}

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()

    @property
    def prompts(self) -> int:
        return self.completed + self.failed


def _count(result: dict[str, Any], key: str) -> int:
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BenchResultError(f"the bench result's {key} is {value!r}, not a count")
    return value


def _figure(result: dict[str, Any], key: str) -> float:
    """A finite, non-negative number (vLLM's NaN means no request measured it)."""
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BenchResultError(f"the bench result's {key} is {value!r}, not a number")
    if not math.isfinite(value) or value < 0:
        raise BenchResultError(f"the bench result's {key} is {value}, not a measurement")
    return float(value)


def summarize(result: dict[str, Any]) -> BenchSummary:
    """Reads the JSON `vllm bench serve --save-result` writes (mean_/median_/std_/pNN_ keys),
    every figure checked: a count is a whole number, a time or rate finite and not negative.
    Latencies are only read when a request completed (vLLM's means over none are NaN)."""
    completed = _count(result, "completed")
    prompts = _count(result, "num_prompts") if "num_prompts" in result else completed
    if prompts < completed:
        raise BenchResultError(f"the bench result has {completed} completed of {prompts} prompts")
    latencies: dict[str, dict[str, float]] = {}
    if completed:
        for metric in ("ttft", "tpot", "itl", "e2el"):
            keys = [
                key
                for key in result
                if isinstance(key, str)
                and key.endswith(f"_{metric}_ms")
                and not key.startswith("std_")
            ]
            if keys:
                latencies[metric] = {key.split("_", 1)[0]: _figure(result, key) for key in keys}
    return BenchSummary(
        completed=completed,
        failed=prompts - completed,
        duration_s=_figure(result, "duration"),
        request_throughput=_figure(result, "request_throughput") if completed else 0.0,
        output_throughput=_figure(result, "output_throughput") if completed else 0.0,
        latencies_ms=latencies,
    )


def verdict(summary: BenchSummary) -> Check:
    """A benchmark passes when every request it sent completed: figures over a run that lost
    requests describe another load than the one asked for, and none at all describe nothing."""
    name = "vllm bench serve: every request completed"
    detail = f"{summary.completed} of {summary.prompts} requests completed"
    if summary.completed == 0:
        return failed(
            name,
            f"{detail}: no figures",
            "run pdctl verify; read the Job's log (the endpoint's errors are there)",
        )
    if summary.failed:
        return failed(
            name,
            f"{detail}; the figures cover the completed ones only",
            "read the Job's log for the errors; lower --concurrency if they are timeouts",
        )
    return passed(name, detail)
