"""The latency policy does not bring a side back down to where it missed its objective lately
(serve_extensions/latency_policy.py `_missed_there`, `missed_there_recently`): each row a side's
misses (over `scale_up_at` of the objective, at so many groups serving, at a time) and then a
decision at 4 groups whose line alone would take one away -> the replicas and the reason.

Prefill, TTFT objective 1 s (a miss over 0.9 s), look-back 30 s: the recall spans 20 look-back
periods, 600 s. At the last decision prefill runs 4 replicas at 0.3 s with 2 requests in flight:
the line (no floor below it: all of the latency as load) gives 0.3 + 0.3 / 3 = 0.4 s at 3
replicas, within the 0.7 s aim, so without a recent miss it comes down one."""

from __future__ import annotations

import pytest

from serve_extensions.latency_policy import (
    MISSED_THERE,
    OVER,
    UNDER,
    Memory,
    SideObservation,
    Tuning,
    decide,
)
from tests.serve_extensions.test_latency_policy import LIMITS, LOOK_BACK_S, OBJECTIVES

RECALL_S = Tuning().recall_look_backs * LOOK_BACK_S  # 600 s


def prefill(running: int, latency: float, at_s: float, ongoing: float) -> SideObservation:
    return SideObservation(running, running, ongoing, latency, 100, at_s, LOOK_BACK_S)


def decode(at_s: float) -> SideObservation:
    return SideObservation(2, 2, 40.0, 0.025, 100, at_s, LOOK_BACK_S)


def last_decision(misses: list[tuple[float, int]], now_s: float) -> tuple[int, str]:
    memory = Memory()
    for at_s, groups in misses:  # a burst: 0.95 s at `groups` replicas, 6 requests each
        missed = decide(
            {"prefill": prefill(groups, 0.95, at_s, 6.0 * groups), "decode": decode(at_s)},
            LIMITS,
            OBJECTIVES,
            memory,
        )["prefill"]
        assert missed.reason == OVER
    decision = decide(
        {"prefill": prefill(4, 0.3, now_s, 2.0), "decode": decode(now_s)},
        LIMITS,
        OBJECTIVES,
        memory,
    )["prefill"]
    return decision.replicas, decision.reason


# (why, misses as (time, groups serving), the decision's time) -> (replicas, reason)
RECALL_ROWS = [
    ("no miss: down on the line", [], 300.0, (3, UNDER)),
    ("missed at 3, 5 minutes ago: held at 4", [(0.0, 3)], 300.0, (4, MISSED_THERE)),
    ("missed at 3, at the recall's end: still held", [(0.0, 3)], RECALL_S, (4, MISSED_THERE)),
    ("missed at 3, past the recall: down", [(0.0, 3)], RECALL_S + 1, (3, UNDER)),
    # a miss with more groups says fewer would miss too
    ("missed at 4: not down to 3", [(0.0, 4)], 300.0, (4, MISSED_THERE)),
    # 4 -> 3 is not where a miss at 2 was
    ("missed at 2 only: down to 3", [(0.0, 2)], 300.0, (3, UNDER)),
    # each miss renews the recall: misses keep coming, the group stays
    ("missed at 3 long ago, at 4 lately", [(0.0, 3), (500.0, 4)], 900.0, (4, MISSED_THERE)),
]


@pytest.mark.parametrize(("why", "misses", "now_s", "want"), RECALL_ROWS)
def test_a_side_is_not_brought_back_down_to_where_it_missed_lately(
    why: str, misses: list[tuple[float, int]], now_s: float, want: tuple[int, str]
) -> None:
    assert last_decision(misses, now_s) == want, why


def test_the_recall_default_the_rows_assume() -> None:
    assert RECALL_S == 600.0
