"""Our tools against the running application: `pdctl verify`, and `pdctl bench`'s Job script
(a real `vllm bench serve`, from the image's vLLM) with pdctl's parser reading what it printed.

pdctl runs from the project venv, with the clone's code (``python -m pdctl.cli`` from the root),
exactly as an operator runs it; only its --url and --metrics-url point here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import METRICS_REPORT_INTERVAL_MS, PROJECT_ROOT, LocalRay
from offline_tokenizer import write_tokenizer

PDCTL_TIMEOUT_S = 180
BENCH_TIMEOUT_S = 600


def run_project(python: Path, code: str, stdin: str = "", *args: str) -> str:
    """A snippet of the project's own code, run by the project venv from the clone's root."""
    done = subprocess.run(
        [str(python), "-c", code, *args],
        cwd=PROJECT_ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=PDCTL_TIMEOUT_S,
        check=True,
    )
    return done.stdout


def verify(pd: LocalRay, python: Path) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pdctl.cli",
            "verify",
            "--url",
            pd.base_url,
            "--metrics-url",
            pd.metrics_url("decode"),
            "--prefill-metrics-url",
            pd.metrics_url("prefill"),
            "--metrics-interval",
            str(METRICS_REPORT_INTERVAL_MS / 1000),
            "--json",
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=PDCTL_TIMEOUT_S,
    )
    checks = json.loads(done.stdout) if done.stdout.strip().startswith("[") else []
    return done.returncode, checks, done.stdout + done.stderr


PREFIX_REUSE = "prefix reuse on a repeated prompt (prefill's prefix cache)"


def test_pdctl_verify_passes(pd: LocalRay, project_python: Path) -> None:
    """Every line passes, the last the prefix-reuse line: the stand-in's prefill caches whole
    blocks and counts its hits as vLLM does (standin_engine.py PrefixCache), so the repeated
    prompt's second request is counted as reusing every whole block of it."""
    code, checks, output = verify(pd, project_python)
    assert code == 0, output
    assert [check["ok"] for check in checks] == [True, True, True, True], output
    assert checks[-1]["name"] == f"{PREFIX_REUSE}: yes", output
    assert "(the first found 0)" in checks[-1]["detail"], output


def test_pdctl_verify_fails_when_transfers_fail(pd: LocalRay, project_python: Path) -> None:
    """Right after the passing run: its repeated prompts' transfers are reported by decode's
    next tick, which can fall after this run's first reading and before its own failed
    hand-off shows (CI, 2026-12-07, when verify took the first transfer it saw)."""
    with pd.transfers_failing():
        code, checks, output = verify(pd, project_python)
    assert code == 1, output
    (kv,) = [c for c in checks if c["name"].startswith("KV moved from prefill to decode")]
    assert kv["ok"] is False, output


BENCH_SCRIPT = """
import json, sys
from pdctl import bench_job
parameters = bench_job.BenchParameters(**json.loads(sys.argv[1]))
manifest = bench_job.job_manifest("e2e", "e2e", "image", parameters)
print(json.dumps(manifest["spec"]["template"]["spec"]["containers"][0]["command"]))
"""
PARSE_SCRIPT = """
import json, sys
from pdctl import bench_job
print(json.dumps(bench_job.summarize(bench_job.result_from_logs(sys.stdin.read())).as_dict()))
"""


def test_pdctl_bench_reads_a_real_vllm_bench_run(
    pd: LocalRay, project_python: Path, model: str, tmp_path: Path, figures: dict
) -> None:
    """The Job's own script with three local changes: the endpoint, a result folder of ours
    instead of the pod's /tmp/pdctl, and a tokenizer made here (no Hugging Face access)."""
    prompts = 12
    parameters = {
        "base_url": pd.base_url,
        "model": model,
        "input_tokens": 32,
        "output_tokens": 16,
        "concurrency": 4,
        "prompts": prompts,
    }
    command = json.loads(run_project(project_python, BENCH_SCRIPT, "", json.dumps(parameters)))
    assert command[:2] == ["bash", "-c"]
    tokenizer = write_tokenizer(tmp_path / "tokenizer")
    script = (
        command[2]
        .replace("/tmp/pdctl", str(tmp_path / "result"))
        .replace("vllm bench serve ", f"vllm bench serve --tokenizer {tokenizer} ", 1)
    )
    records_before = len(pd.records())
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    job = subprocess.run(
        ["bash", "-c", script],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BENCH_TIMEOUT_S,
    )
    (tmp_path / "job.log").write_text(job.stdout)
    assert job.returncode == 0, job.stdout[-4000:]
    summary = json.loads(run_project(project_python, PARSE_SCRIPT, job.stdout))
    figures["vllm_bench_serve"] = summary
    assert summary["completed"] == prompts
    assert summary["failed"] == 0
    assert set(summary["latencies_ms"]) == {"ttft", "tpot", "itl", "e2el"}
    for figures_ms in summary["latencies_ms"].values():
        assert {"mean", "median", "p50", "p90", "p99"} <= set(figures_ms)
    assert summary["request_throughput"] > 0
    # Every benchmark request went through the P/D hand-off.
    new = [r for r in pd.records()[records_before:] if r["event"] == "request"]
    phases = [r["phase"] for r in new]
    if phases.count("prefill") < prompts:
        pytest.fail(f"{phases.count('prefill')} prefill calls for {prompts} requests")
    assert phases.count("prefill") == phases.count("decode")
