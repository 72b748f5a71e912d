"""pdctl bench: the Job it submits and the parser of `vllm bench serve --save-result` output."""

from __future__ import annotations

import json

import pytest

from pdctl.bench_job import (
    RESULT_BEGIN,
    RESULT_END,
    BenchParameters,
    BenchResultError,
    job_manifest,
    result_from_logs,
    summarize,
    verdict,
)

# The keys vllm's benchmarks/serve.py writes with --save-result (vLLM 0.26), trimmed lists.
SAVED_RESULT = {
    "date": "20261129-120000",
    "backend": "openai-chat",
    "model_id": "Qwen/Qwen3-32B",
    "num_prompts": 200,
    "request_rate": "inf",
    "max_concurrency": 16,
    "duration": 61.5,
    "completed": 198,
    "total_input_tokens": 202752,
    "total_output_tokens": 50688,
    "request_throughput": 3.22,
    "request_goodput": None,
    "output_throughput": 824.2,
    "total_token_throughput": 4121.0,
    "input_lens": [1024],
    "output_lens": [256],
    "ttfts": [0.21],
    "itls": [[0.011]],
    "generated_texts": ["..."],
    "errors": ["", "timeout"],
    "mean_ttft_ms": 212.4,
    "median_ttft_ms": 190.2,
    "std_ttft_ms": 40.1,
    "p50_ttft_ms": 190.2,
    "p90_ttft_ms": 280.5,
    "p99_ttft_ms": 401.7,
    "mean_tpot_ms": 12.1,
    "median_tpot_ms": 11.8,
    "std_tpot_ms": 1.1,
    "p50_tpot_ms": 11.8,
    "p90_tpot_ms": 13.9,
    "p99_tpot_ms": 15.2,
    "mean_itl_ms": 12.0,
    "median_itl_ms": 11.5,
    "std_itl_ms": 3.0,
    "p50_itl_ms": 11.5,
    "p90_itl_ms": 14.0,
    "p99_itl_ms": 22.3,
    "mean_e2el_ms": 3300.0,
    "median_e2el_ms": 3250.0,
    "std_e2el_ms": 200.0,
    "p50_e2el_ms": 3250.0,
    "p90_e2el_ms": 3600.0,
    "p99_e2el_ms": 3900.0,
}


def test_summary_reads_percentiles_and_throughput() -> None:
    summary = summarize(SAVED_RESULT)
    assert summary.latencies_ms["ttft"] == {
        "mean": 212.4,
        "median": 190.2,
        "p50": 190.2,
        "p90": 280.5,
        "p99": 401.7,
    }
    assert set(summary.latencies_ms) == {"ttft", "tpot", "itl", "e2el"}
    assert (summary.completed, summary.failed) == (198, 2)
    assert summary.output_throughput == SAVED_RESULT["output_throughput"]


def test_result_is_read_between_the_markers_of_the_job_logs() -> None:
    logs = f"progress 100%\n{RESULT_BEGIN}\n{json.dumps(SAVED_RESULT)}\n{RESULT_END}\n"
    assert result_from_logs(logs) == SAVED_RESULT
    with pytest.raises(ValueError, match="no result"):
        result_from_logs("Traceback: connection refused")


def test_job_runs_vllm_bench_serve_with_the_parameters_on_system_nodes() -> None:
    parameters = BenchParameters(
        base_url="http://pd-llm-serve-svc.llm-serving.svc:8000",
        model="Qwen/Qwen3-32B",
        input_tokens=2048,
        concurrency=8,
    )
    job = job_manifest("bench-1", "llm-serving", "image:tag", parameters)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    script = container["command"][2]
    assert script.startswith("vllm bench serve")
    for flag, value in (
        ("--random-input-len", "2048"),
        ("--max-concurrency", "8"),
        ("--dataset-name", "random"),
        ("--save-result", ""),
    ):
        assert f"{flag} {value}".strip() in script
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 0


# What a run over a dead endpoint writes: vLLM's means over no request are NaN (json.dump's
# spelling), its throughputs 0.
NOTHING_COMPLETED = {
    **SAVED_RESULT,
    "completed": 0,
    "request_throughput": 0.0,
    "output_throughput": 0.0,
    **{key: float("nan") for key in SAVED_RESULT if key.endswith("_ms")},
}


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"completed": "198"}, "not a count"),
        ({"completed": -1}, "not a count"),
        ({"completed": True}, "not a count"),
        ({"completed": 201}, "201 completed of 200"),
        ({"num_prompts": None}, "not a count"),
        ({"duration": float("nan")}, "not a measurement"),
        ({"duration": "61.5"}, "not a number"),
        ({"request_throughput": float("inf")}, "not a measurement"),
        ({"mean_ttft_ms": float("nan")}, "not a measurement"),
        ({"p99_itl_ms": -3.0}, "not a measurement"),
    ],
)
def test_results_that_are_not_measurements_are_refused(changes, fragment) -> None:
    with pytest.raises(BenchResultError, match=fragment):
        summarize({**SAVED_RESULT, **changes})


def test_a_run_where_nothing_completed_fails_and_a_run_that_lost_requests_fails() -> None:
    nothing = summarize(NOTHING_COMPLETED)
    assert (nothing.completed, nothing.latencies_ms) == (0, {})
    assert not verdict(nothing).ok
    assert "0 of 200" in verdict(nothing).detail
    assert not verdict(summarize(SAVED_RESULT)).ok  # 2 of 200 failed
    assert verdict(summarize({**SAVED_RESULT, "completed": 200})).ok


@pytest.mark.parametrize(
    "logs",
    [
        "",
        f"{RESULT_BEGIN}\n{{not json\n{RESULT_END}",
        f"{RESULT_BEGIN}\n[1, 2]\n{RESULT_END}",
        f"{RESULT_BEGIN}\n{'[' * 100_000}\n{RESULT_END}",
        f"{RESULT_BEGIN}\n{{}}\n",  # cut before the end marker
    ],
    ids=["empty", "broken", "array", "deep", "cut"],
)
def test_logs_without_a_readable_result_are_one_error(logs: str) -> None:
    with pytest.raises(BenchResultError):
        result_from_logs(logs)


def test_the_last_result_in_the_logs_counts() -> None:
    """The markers can appear twice in a log (a retried container writes both); the last
    run's result is the one that ended."""
    first = {**SAVED_RESULT, "completed": 1}
    logs = (
        f"{RESULT_BEGIN}\n{json.dumps(first)}\n{RESULT_END}\n"
        f"{RESULT_BEGIN}\n{json.dumps(SAVED_RESULT)}\n{RESULT_END}\n"
    )
    assert result_from_logs(logs)["completed"] == SAVED_RESULT["completed"]
