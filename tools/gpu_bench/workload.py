"""What the benchmark sends: two datasets of `vllm bench serve` (vLLM 0.26.0,
vllm/benchmarks/datasets/datasets.py) at a concurrency sweep, and the command for one point."""

from __future__ import annotations

from dataclasses import dataclass

# The sweep (at least 1, 8, 32, 128, 256 streams).
CONCURRENCY = (1, 8, 32, 128, 256)
# Requests per point: a few rounds of the concurrency each, at least 16 so that a low point
# still has a p99 over more than a handful of requests (TTFT and E2E percentiles are over
# requests; ITL percentiles are over every output token, 128 per request).
PROMPTS = {1: 16, 8: 40, 32: 128, 128: 384, 256: 768}
OUTPUT_TOKENS = 128
WARMUPS = 4
PERCENTILES = "50,90,99"


@dataclass(frozen=True)
class Dataset:
    name: str  # the key results are stored under
    description: str
    flags: tuple[str, ...]  # `vllm bench serve` flags that select and shape it


DATASETS = {
    dataset.name: dataset
    for dataset in (
        Dataset(
            "random",
            f"random token ids, 1024 in / {OUTPUT_TOKENS} out",
            (
                "--dataset-name",
                "random",
                "--random-input-len",
                "1024",
                "--random-output-len",
                str(OUTPUT_TOKENS),
            ),
        ),
        # Shared prefixes: 8 prompts' worth of 1024-token prefixes, each request one of them plus
        # its own 256-token suffix: the prefix cache (and, P/D, prefill's) is hit, as in
        # multi-turn chat and system prompts.
        Dataset(
            "prefix",
            f"prefix_repetition: 8 shared 1024-token prefixes + 256 own tokens, "
            f"{OUTPUT_TOKENS} out",
            (
                "--dataset-name",
                "prefix_repetition",
                "--prefix-repetition-prefix-len",
                "1024",
                "--prefix-repetition-suffix-len",
                "256",
                "--prefix-repetition-num-prefixes",
                "8",
                "--prefix-repetition-output-len",
                str(OUTPUT_TOKENS),
            ),
        ),
    )
}


def bench_args(
    base_url: str,
    model: str,
    tokenizer: str,
    dataset: Dataset,
    concurrency: int,
    result_dir: str,
    result_file: str,
) -> list[str]:
    """One point's `vllm bench serve` arguments: a fixed number of streams
    (``--max-concurrency``), every request sent at once (the default infinite request rate),
    fixed output lengths (``--ignore-eos``)."""
    return [
        "--backend",
        "openai",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        *dataset.flags,
        "--ignore-eos",
        "--max-concurrency",
        str(concurrency),
        "--num-prompts",
        str(PROMPTS[concurrency]),
        "--num-warmups",
        str(WARMUPS),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        PERCENTILES,
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        result_dir,
        "--result-filename",
        result_file,
        "--seed",
        "20261202",
    ]


# The figures kept from `vllm bench serve --save-result` (serve.py's result keys).
FIGURES = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_tpot_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)
