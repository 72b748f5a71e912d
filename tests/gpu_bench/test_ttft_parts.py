"""The deployed TTFT's parts: histogram means read as Prometheus prints them, the side filter,
the residual, and the recorded run's table in docs/verification.md."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from tools.gpu_bench import ttft_parts

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "gpu-bench"
# Each recorded run whose parts docs/verification.md shows: (its stem, variant); the /metrics
# pages it read are saved beside the record in <stem>-metrics/
RECORDED_PARTS = [
    ("2026-12-02-h200-qwen3-8b-get-zcopy", "deployed"),
    ("2026-12-07-h100-qwen3-8b-batching", "deployed-batching-10ms"),
]


def page(name: str, observations: dict[str, list[float]]) -> str:
    """A /metrics page as prometheus_client prints one labelled histogram."""
    registry = CollectorRegistry()
    histogram = Histogram(name, "h", ["deployment"], registry=registry)
    for deployment, values in observations.items():
        for value in values:
            histogram.labels(deployment).observe(value)
    return generate_latest(registry).decode()


@pytest.mark.parametrize(
    ("observations", "where", "expected"),
    [
        ({"Prefill:m": [1.0, 3.0]}, None, 2.0),
        ({"Prefill:m": [1.0, 3.0], "Decode:m": [10.0]}, None, 14.0 / 3),
        ({"Prefill:m": [1.0, 3.0], "Decode:m": [10.0]}, "Prefill:", 2.0),
        ({"Decode:m": [10.0]}, "Prefill:", math.nan),
    ],
)
def test_a_histogram_mean_over_the_series_kept(observations, where, expected) -> None:
    text = page("latency", observations)
    keep = (lambda labels: labels["deployment"].startswith(where)) if where else (lambda _: True)
    value = ttft_parts.mean_of(text, "latency", keep).value
    assert (math.isnan(value) and math.isnan(expected)) or value == pytest.approx(expected)


def test_the_part_outside_the_engines_is_what_the_clients_waited_beyond_them() -> None:
    prefill = page(ttft_parts.SERVE_PROCESSING, {"Prefill:m": [300.0], "Decode:m": [9e9]})
    prefill += page(ttft_parts.ENGINE["ttft"], {"Prefill:m": [0.25]}).replace("# HELP", "# H")
    decode = page(ttft_parts.ENGINE["ttft"], {"Decode:m": [0.1]})
    parts = ttft_parts.deployed_parts(prefill, decode, client_ms=500.0)
    assert parts["prefill's Serve replica"] == pytest.approx(300.0)
    assert parts["of it prefill's engine to its token"] == pytest.approx(250.0)
    assert parts["decode's engine to its first token"] == pytest.approx(100.0)
    assert parts["outside both engines (ingress, Serve's hops, stream batching)"] == (
        pytest.approx(100.0)
    )


def test_the_clients_mean_weighs_each_point_by_its_requests() -> None:
    points = [{"mean_ttft_ms": 10.0, "completed": 1}, {"mean_ttft_ms": 40.0, "completed": 3}]
    assert ttft_parts.client_mean_ttft_ms(points) == pytest.approx(32.5)


@pytest.mark.parametrize(("record", "variant"), RECORDED_PARTS)
def test_the_recorded_runs_parts_are_the_table_in_the_docs(record: str, variant: str) -> None:
    parts = ttft_parts.for_run(RECORDS / f"{record}.json", RECORDS / f"{record}-metrics", variant)
    assert ttft_parts.table(parts) in (ROOT / "docs" / "verification.md").read_text()
