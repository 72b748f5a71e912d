"""How `make e2e-bench` turns what it observed into its figures: where the ingress's latency
bends, how a Serve access-log line becomes a hop's start, how the hops add up to the TTFT, and
how the foreign load of a point is counted. The bench lives in tests/e2e (its own venv); these
parts need nothing of Ray."""

from __future__ import annotations

import importlib.util
import sys
from datetime import datetime
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "tests" / "e2e"


def load(name: str) -> ModuleType:
    sys.path.insert(0, str(E2E))  # the bench imports its siblings as top-level modules
    try:
        spec = importlib.util.spec_from_file_location(name, E2E / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(E2E))


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("bench_orchestration")


@pytest.fixture(scope="module")
def breakdown() -> ModuleType:
    return load("ttft_breakdown")


@pytest.fixture(scope="module")
def cpu_use() -> ModuleType:
    from tools import cpu_use

    return cpu_use


def point(ttft_ms: float, tpot_ms: float, requests_per_s: float) -> dict:
    cpu = {"ingress_cores": 0.5, "ingress_cpu_ms_per_request": 2.0}
    return {
        "ttft": {"p50_ms": ttft_ms},
        "tpot": {"p50_ms": tpot_ms},
        "requests_per_s": requests_per_s,
        "cpu": cpu,
    }


# (TTFT p50, per token p50) per concurrency -> the last concurrency before the bend, where it bent.
@pytest.mark.parametrize(
    ("sweep", "streams", "bent_at"),
    [
        # TTFT doubles between 16 and 64 streams: 16 is the ceiling.
        ({1: (50, 5), 16: (90, 6), 64: (120, 7)}, 16, 64),
        # Per token doubles first (TTFT stays under 2x): the bend is the token time's.
        ({1: (50, 5), 16: (60, 8), 64: (70, 11)}, 16, 64),
        # Neither doubles: the highest concurrency, not bent.
        ({1: (50, 5), 16: (60, 6), 64: (99, 9.9)}, 64, None),
        # A stand-in without token time: per token ~0 at 1 stream never counts, TTFT does.
        ({1: (20, 0.0), 8: (30, 0.3), 64: (300, 5.0)}, 8, 64),
        # Bent at the first step up: the lowest concurrency is the ceiling.
        ({1: (20, 5), 8: (41, 5)}, 1, 8),
    ],
)
def test_the_ingress_ceiling_is_the_last_concurrency_before_its_latency_doubles(
    bench: ModuleType, sweep: dict, streams: int, bent_at: int | None
) -> None:
    app = "pd-ingress-1"
    runs = {
        str(concurrency): {app: point(ttft, tpot, requests_per_s=concurrency * 3.0)}
        for concurrency, (ttft, tpot) in sweep.items()
    }
    found = bench.latency_bend(runs, app)
    assert (found["streams"], found["bent_at"]) == (streams, bent_at)
    assert found["output_tokens_per_s"] == round(streams * 3.0 * bench.OUTPUT_TOKENS, 1)


LINE_TIME = "2026-12-02 14:30:03,962"


# An access line -> the role of its component and the start it gives (its time less its latency).
@pytest.mark.parametrize(
    ("line", "part", "latency_ms"),
    [
        (f"INFO {LINE_TIME} proxy 127.0.0.1 RID -- POST /v1/completions 200 35.2ms", "proxy", 35.2),
        (
            f"INFO {LINE_TIME} pd-ingress-1_OpenAiIngress 74oarbgj RID -- POST /v1/completions 200 "
            "30.0ms",
            "ingress",
            30.0,
        ),
        (
            f"INFO {LINE_TIME} pd-llm_Decode:Qwen--Qwen3-32B hae7zf1a RID -- CALL completions OK "
            "12.5ms",
            "decode",
            12.5,
        ),
        (
            f"INFO {LINE_TIME} pd-llm_Prefill:Qwen--Qwen3-32B m0d1h6jq RID -- CALL completions OK "
            "3.0ms",
            "prefill",
            3.0,
        ),
        (
            f"INFO {LINE_TIME} aggregated_LLMServer:Qwen--Qwen3-32B x1 RID -- CALL completions OK "
            "4.0ms",
            "server",
            4.0,
        ),
    ],
)
def test_a_serve_access_line_gives_when_its_component_began_the_request(
    breakdown: ModuleType, tmp_path: Path, line: str, part: str, latency_ms: float
) -> None:
    (tmp_path / "replica.log").write_text(
        f"INFO {LINE_TIME} proxy 127.0.0.1 OTHER -- POST /v1/completions 200 1.0ms\n"
        f"INFO {LINE_TIME} pd-llm_Decode:m abc RID -- a line that is no access line\n{line}\n"
    )
    ended = datetime.strptime(LINE_TIME, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    starts = breakdown.serve_starts(tmp_path, {"RID"})
    assert set(starts) == {"RID"}
    assert starts["RID"] == {part: pytest.approx(ended - latency_ms / 1000)}


def test_the_hops_add_up_to_each_requests_ttft(breakdown: ModuleType) -> None:
    # One request through P/D, every stamp 1 ms after the last but the prefill step (5 ms).
    names = [a for _, a, _ in breakdown.PD_SEGMENTS] + ["first_token"]
    stamps = dict(zip(names, [100.0 + 0.001 * i for i in range(len(names))], strict=True))
    stamps["prefill_output"] += 0.004
    for later in names[names.index("prefill_output") + 1 :]:
        stamps[later] += 0.004
    serve = {k: stamps[k] for k in ("proxy", "ingress", "decode", "prefill")}
    records = [
        {"event": "request", "request_id": "r", "phase": side,
         "time_start": stamps[f"{side}_engine"]}
        for side in ("prefill", "decode")
    ] + [
        {"event": "output", "request_id": "r", "phase": side,
         "time_first_output": stamps[f"{side}_output"]}
        for side in ("prefill", "decode")
    ] + [{"event": "start", "role": "decode"}]  # fmt: skip
    engines = breakdown.engine_times(records, {"r"})
    client = {"r": (stamps["sent"], stamps["first_token"]), "lost": (1.0, 2.0)}
    found = breakdown.breakdown(client, {"r": serve}, engines, breakdown.PD_SEGMENTS)
    assert found["requests"] == 1  # "lost" has no Serve or engine stamps
    segments = found["segments"]
    assert segments["prefill step"]["p50_ms"] == pytest.approx(5.0)
    total = sum(segment["p50_ms"] for segment in segments.values())
    assert total == pytest.approx(found["ttft_p50_ms"], abs=0.05)


def test_the_foreign_load_is_what_the_machine_spent_less_the_benchs_own_processes(
    cpu_use: ModuleType,
) -> None:
    before = cpu_use.Sample(wall_s=10.0, machine_s=100.0, tree_s=40.0, named_s={"proxy": 1.0})
    # In 2 s the machine spent 3.5 CPU seconds, the bench's tree 2.5 of them.
    after = cpu_use.Sample(wall_s=12.0, machine_s=103.5, tree_s=42.5, named_s={"proxy": 1.6})
    used = cpu_use.use_between(before, after)
    assert used["foreign_cores"] == pytest.approx(0.5)
    assert used["cpu_s"] == {"proxy": pytest.approx(0.6)}


def test_a_process_cpu_time_is_read_from_proc(cpu_use: ModuleType) -> None:
    import os
    import time

    start = cpu_use.process_cpu_s(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert cpu_use.process_cpu_s(os.getpid()) > start
    assert cpu_use.process_cpu_s(2**22 + 1) is None  # above pid_max: no such process
