"""The latency-policy replays recorded under docs/latency-replay/ (the simulation's, and the local
Ray's: *-local.json, `make latency-replay`) are what the tools compute from the benchmark tier's
figures, and docs/verification.md quotes their tables as the tools print them: a figure edited
by hand, or a model fitted to other data, fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.latency_replay import fit, table
from tools.latency_replay_scale import ReplayScale, engine_latency
from tools.latency_replay_score import table as local_table

ROOT = Path(__file__).resolve().parents[2]
ALL = sorted((ROOT / "docs" / "latency-replay").glob("*.json"))
RECORDED = [path for path in ALL if not path.name.endswith("-local.json")]
LOCAL = [path for path in ALL if path.name.endswith("-local.json")]


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_the_recorded_model_is_the_fit_of_the_real_engine_figures(path: Path) -> None:
    _, fitted = fit()
    assert json.loads(path.read_text())["model"] == fitted


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_verification_quotes_the_recorded_table(path: Path) -> None:
    page = (ROOT / "docs" / "verification.md").read_text()
    assert table(json.loads(path.read_text())) in page


def test_a_replay_is_recorded() -> None:
    assert RECORDED


def test_a_local_replay_is_recorded() -> None:
    assert LOCAL


@pytest.mark.parametrize("path", LOCAL, ids=lambda p: p.name)
def test_a_local_replays_engines_are_the_fit_scaled_as_recorded(path: Path) -> None:
    recorded = json.loads(path.read_text())
    model, fitted = fit()
    assert recorded["model"] == fitted
    factors = {k: recorded["scale"][k] for k in ("compression", "dilation", "prompt_divisor")}
    # Runs before decode's companions (2026-12-07) record none: a stream cost C x D sequences;
    # runs before the replica's start was measured on this machine record none: 19 s.
    scale = ReplayScale(
        **factors,
        companions=recorded["scale"].get("companions", False),
        replica_start_s=recorded["scale"].get("replica_start_s", 19.0),
    )
    assert recorded["engine_latency"] == engine_latency(model, scale)
    for result in recorded["results"].values():
        assert result["engine_latency"] == recorded["engine_latency"]


@pytest.mark.parametrize("path", LOCAL, ids=lambda p: p.name)
def test_a_local_replays_minutes_add_up_to_its_figures(path: Path) -> None:
    """Each minute's verdict is its two percentiles against the run's objectives, and the
    counts are those verdicts'."""
    recorded = json.loads(path.read_text())
    objectives = recorded["objectives_run_s"]
    for name, result in recorded["results"].items():
        per_minute = recorded["per_minute"][name]
        assert result["minutes_scored"] == len(per_minute)
        assert result["minutes_held"] == sum(1 for m in per_minute if m["held"])
        for minute in per_minute:
            ttft_ok = not minute["ttft_unanswered"] and (
                minute["ttft_s"] is None or minute["ttft_s"] <= objectives["ttft_s"]
            )
            itl_ok = minute["itl_s"] is None or minute["itl_s"] <= objectives["itl_s"]
            assert minute["held"] == (ttft_ok and itl_ok), (name, minute)


@pytest.mark.parametrize("path", LOCAL, ids=lambda p: p.name)
def test_verification_quotes_the_local_replays_table_and_scale(path: Path) -> None:
    page = (ROOT / "docs" / "verification.md").read_text()
    recorded = json.loads(path.read_text())
    assert local_table(recorded) in page
    assert f"latency-replay/{path.name}" in page
    assert f"compressed {recorded['scale']['compression']:g} times" in page
