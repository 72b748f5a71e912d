"""The latency-policy replay recorded under docs/latency-replay/ is what the tool computes from
the benchmark tier's figures, and docs/verification.md quotes its table as the tool prints it:
a figure edited by hand, or a model fitted to other data, fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.latency_replay import fit, table

ROOT = Path(__file__).resolve().parents[2]
RECORDED = sorted((ROOT / "docs" / "latency-replay").glob("*.json"))


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
