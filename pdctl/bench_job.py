"""`vllm bench serve`, run from the Ray LLM image as a Kubernetes Job next to the endpoint, and
its saved result parsed into the figures operators compare (TTFT, ITL, TPOT, throughput)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

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


def result_from_logs(logs: str) -> dict[str, Any]:
    _, _, rest = logs.partition(RESULT_BEGIN)
    body, found, _ = rest.partition(RESULT_END)
    if not found:
        raise ValueError("the bench Job's logs hold no result (did `vllm bench serve` fail?)")
    return json.loads(body)


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


def summarize(result: dict[str, Any]) -> BenchSummary:
    """Reads the JSON `vllm bench serve --save-result` writes (mean_/median_/std_/pNN_ keys)."""
    latencies = {}
    for metric in ("ttft", "tpot", "itl", "e2el"):
        figures = {
            key.split("_", 1)[0]: value
            for key, value in result.items()
            if key.endswith(f"_{metric}_ms") and not key.startswith("std_")
        }
        if figures:
            latencies[metric] = figures
    return BenchSummary(
        completed=result["completed"],
        failed=result.get("num_prompts", result["completed"]) - result["completed"],
        duration_s=result["duration"],
        request_throughput=result["request_throughput"],
        output_throughput=result["output_throughput"],
        latencies_ms=latencies,
    )
