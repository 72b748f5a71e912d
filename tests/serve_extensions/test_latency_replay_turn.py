"""The turn to long answers on the simulation (tools/latency_replay_turn.py): the candidate
rules for holding it from decode at one replica, as docs/verification.md reports them. None holds
minutes 61 and 62: the earliest ask on what decode reports comes about 40 s into the blend and a
replica serves 166 s after it; the lead's horizon changes nothing, stepping to the need only
costs, and without Serve's upscale delay decode is moved past 2 replicas on the long answers'
noise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.computed_once import computed_once
from tools.latency_replay_turn import TURN_S, Turn, tables, turn

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def found() -> Turn:
    return computed_once("latency-replay-turn", turn)


def _row(found: Turn, starts: str) -> dict:
    (result,) = [r for c, r in found.candidates if c.name.startswith(starts)]
    return result


def test_verification_quotes_both_tables(found: Turn) -> None:
    page = (ROOT / "docs" / "verification.md").read_text()
    for table in tables(found):
        assert table in page


def test_no_candidate_holds_the_first_two_minutes_of_the_turn(found: Turn) -> None:
    for candidate, result in found.candidates:
        assert {61, 62} <= set(result["out"]), candidate.name


def test_the_lead_asks_about_40_s_into_the_blend(found: Turn) -> None:
    at, reason = _row(found, "today's policy")["first_ask"]
    assert TURN_S + 30 <= at <= TURN_S + 60
    assert reason == "load_rising"


def test_a_demand_estimate_asks_no_sooner_than_the_lead_but_by_seconds(found: Turn) -> None:
    (_, lead), *estimates = found.asks
    for name, at in estimates:
        assert at is not None, name
        assert abs(at - lead) <= 10, name


def test_the_lead_horizon_of_a_scale_up_changes_nothing(found: Turn) -> None:
    assert _row(found, "lead horizon") == _row(found, "today's policy")


def test_stepping_to_the_need_holds_no_minute_more_and_costs(found: Turn) -> None:
    today, step = _row(found, "today's policy"), _row(found, "step up")
    assert step["out"] == today["out"]
    assert step["decode_path"] == [1, 3]
    assert step["replica_seconds_total"] > today["replica_seconds_total"]


@pytest.mark.parametrize(
    ("without", "today"),
    [
        ("no upscale delay on decode (0 s", "today's policy"),
        ("no upscale delay on decode, with", "today's, with"),
    ],
)
def test_without_the_upscale_delay_decode_follows_the_noise(
    found: Turn, without: str, today: str
) -> None:
    """One minute fewer out, for a move to 4 replicas on the long answers that 2 hold: the asks
    for more at 2 replicas last seconds, fewer than Serve's 60 s, which is the cool-down."""
    fast, slow = _row(found, without), _row(found, today)
    assert len(fast["out"]) == len(slow["out"]) - 1
    assert slow["decode_path"] == [1, 2]
    assert fast["decode_path"] == [1, 2, 4]
    assert fast["replica_seconds_total"] >= 1.2 * slow["replica_seconds_total"]
