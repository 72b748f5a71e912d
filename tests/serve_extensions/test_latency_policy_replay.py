"""The latency policy in the simulation of Serve 2.58's loop (tools/latency_replay.py), started
where the second local replay's queue fallback had put decode (3 replicas in the long-prompt
phase, where one serves): the scale-down judged on the floor brings decode down as the load
allows and never flaps, and the objectives still hold in 95 % of the minutes."""

from __future__ import annotations

from typing import Any

import pytest

from tools.latency_replay import DURATION_S, WARM_UP_S, latency_from


@pytest.fixture(scope="module")
def from_three() -> dict[str, Any]:
    return latency_from({"prefill": 3, "decode": 3}, log=lambda _: None)


def test_decode_comes_down_from_three_replicas_it_does_not_need(from_three: dict) -> None:
    held_at_three = 3 * (DURATION_S - WARM_UP_S)  # the rule that counted all latency as load
    assert from_three["replica_seconds"]["decode"] < held_at_three
    decode = [minute["replicas"]["decode"] for minute in from_three["per_minute"]]
    assert min(decode) == 1


def test_decode_moves_down_then_up_once_with_the_load_and_never_flaps(from_three: dict) -> None:
    decode = [minute["replicas"]["decode"] for minute in from_three["per_minute"]]
    path = [
        count for count, before in zip(decode, [None, *decode], strict=False) if count != before
    ]
    # one replica at a time down as the long prompts end, up once for the long answers
    assert path == [3, 2, 1, 2]


def test_the_objectives_still_hold_in_95_percent_of_the_minutes(from_three: dict) -> None:
    assert from_three["share_held"] >= 0.95
