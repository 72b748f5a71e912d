"""The `make e2e-bench` figures in the docs are the recorded runs (docs/e2e-bench/*.json), as the
bench's own `--report` prints them: a table edited by hand, or a run recorded without its table,
fails here. The bench lives in tests/e2e (its own venv); its table needs nothing of Ray."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "tests" / "e2e"
RESULTS = sorted((ROOT / "docs" / "e2e-bench").glob("*.json"))


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(E2E))  # the bench imports its harness as a top-level module
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_orchestration", E2E / "bench_orchestration.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(E2E))


def test_there_is_a_recorded_stream_batching_run() -> None:
    assert any("stream-batching" in path.name for path in RESULTS)


@pytest.mark.parametrize("path", RESULTS, ids=[path.name for path in RESULTS])
def test_the_docs_tables_are_printed_from_the_recorded_runs(bench: ModuleType, path: Path) -> None:
    page = (ROOT / "docs" / "verification.md").read_text()
    result = json.loads(path.read_text())
    assert bench.table(result) in page
    assert f"e2e-bench/{path.name}" in page


@pytest.mark.parametrize("path", RESULTS, ids=[path.name for path in RESULTS])
def test_each_recorded_run_names_its_load_and_every_application_its_interval(
    path: Path,
) -> None:
    """A figure from a shared 2-core machine means little without the load it ran under."""
    result = json.loads(path.read_text())
    assert len(result["machine"]["load_average_before"]) == 3
    assert len(result["machine"]["load_average_after"]) == 3
    for runs in result["runs"].values():
        applications = set(runs) - {"ratios"}
        assert applications == set(result["stream_batching_interval_ms"])
        assert set(runs["ratios"]) == applications - {result["baseline"]}
        assert all(runs[app]["failed"] == 0 for app in applications)


INGRESS_SWEEPS = [path for path in RESULTS if "ingress" in path.name]
BREAKDOWNS = [path for path in RESULTS if "breakdown" in path.name]


def test_there_is_a_recorded_ingress_sweep_and_ttft_breakdown() -> None:
    assert INGRESS_SWEEPS
    assert BREAKDOWNS


@pytest.mark.parametrize("path", INGRESS_SWEEPS, ids=[path.name for path in INGRESS_SWEEPS])
def test_each_ingress_variant_ran_its_replica_count_and_every_point_its_cpu(path: Path) -> None:
    """The variant's ingress replicas were found in Ray's actor table (so their CPU is the
    ingress's), and every point names the foreign load it ran under."""
    result = json.loads(path.read_text())
    for app, replicas in result["ingress_replicas"].items():
        assert result["processes"][f"{app}:ingress"] == replicas
        assert result["processes"][f"{app}:decode"] >= 1
    assert result["processes"]["proxy"] >= 1
    for runs in result["runs"].values():
        for app in result["ingress_replicas"]:
            cpu = runs[app]["cpu"]
            assert len(cpu["foreign_cores"]) == result["rounds"]
            assert len(cpu["load_average_before"]) == len(cpu["load_average_after"]) == 3


@pytest.mark.parametrize("path", INGRESS_SWEEPS, ids=[path.name for path in INGRESS_SWEEPS])
def test_operating_md_quotes_the_recorded_ingress_ceiling(path: Path) -> None:
    """docs/operating.md sizes the ingress by the sweep: its figures are the JSON's."""
    page = (ROOT / "docs" / "operating.md").read_text()
    result = json.loads(path.read_text())
    assert f"e2e-bench/{path.name}" in page
    for app, found in result["bend"].items():
        replicas = result["ingress_replicas"][app]
        assert (
            f"{replicas} ingress replica{'s' if replicas > 1 else ''}: "
            f"{found['streams']} streams, {found['output_tokens_per_s']:.0f} output tokens/s, "
            f"{found['ingress_cpu_ms_per_request']:.2f} ms of ingress CPU per request"
        ) in page


@pytest.mark.parametrize("path", BREAKDOWNS, ids=[path.name for path in BREAKDOWNS])
def test_every_breakdown_accounts_for_each_timed_request(path: Path) -> None:
    """Every request of a point found its Serve and engine timestamps (a request missing from
    the breakdown would leave its hops out of the figures)."""
    result = json.loads(path.read_text())
    for concurrency, parts in result["breakdown"].items():
        for app, found in parts.items():
            assert found["requests"] == result["runs"][concurrency][app]["requests"]
