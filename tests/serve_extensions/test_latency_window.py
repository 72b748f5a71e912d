"""A replica's latency window (serve_extensions/latency_window.py), without Ray: each row the
samples a replica saw, when, and what it reports to the latency policy then."""

from __future__ import annotations

import pytest

from serve_extensions.latency_policy import percentile
from serve_extensions.latency_window import LatencyWindow, StreamClock


class Clock:
    """Time that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


TEN = [0.1 * n for n in range(1, 11)]  # 0.1 .. 1.0 s

# (window_s, percentile, max_samples, [(seconds after start, latency)], report at) ->
# (percentile reported, samples)
ROWS = [
    # nothing seen: no latency, no samples (the policy's queue fallback)
    (30, 95, 4096, [], 0, (None, 0)),
    # one sample: it is every percentile
    (30, 95, 4096, [(0, 0.25)], 1, (0.25, 1)),
    # nearest rank: p95 of ten samples is the tenth, p50 the fifth
    (30, 95, 4096, [(0, v) for v in TEN], 1, (TEN[9], 10)),
    (30, 50, 4096, [(0, v) for v in TEN], 1, (TEN[4], 10)),
    # samples older than the window are gone: only the last two of 1.0 s and 0.2 s count
    (30, 95, 4096, [(0, 5.0), (20, 1.0), (40, 0.2)], 45, (1.0, 2)),
    # a sample exactly window_s old still counts
    (30, 95, 4096, [(0, 5.0), (10, 0.2)], 30, (5.0, 2)),
    # all expired: back to nothing
    (30, 95, 4096, [(0, 5.0)], 31, (None, 0)),
    # bounded: at most max_samples, the latest ones (the 9.0 s outlier was the first, so gone)
    (30, 99, 4, [(0, 9.0), (1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)], 5, (0.4, 4)),
]


@pytest.mark.parametrize(("window_s", "q", "max_samples", "samples", "at", "want"), ROWS)
def test_the_window_reports_the_percentile_of_its_recent_samples(
    window_s: float,
    q: float,
    max_samples: int,
    samples: list[tuple[float, float]],
    at: float,
    want: tuple[float | None, int],
) -> None:
    clock = Clock()
    start = clock.now
    window = LatencyWindow(window_s, q, max_samples, clock=clock)
    for offset, latency in samples:
        clock.now = start + offset
        window.add(latency)
    clock.now = start + at
    assert window.report() == want


def test_the_window_uses_the_policys_percentile_rule() -> None:
    clock = Clock()
    window = LatencyWindow(30, 90, clock=clock)
    values = [0.05, 0.3, 0.01, 0.2, 0.7, 0.04, 0.9, 0.11, 0.5, 0.33, 0.08, 0.6]
    for value in values:
        window.add(value)
    assert window.report() == (percentile(values, 90), len(values))


def test_memory_stays_bounded_however_many_requests_come() -> None:
    clock = Clock()
    window = LatencyWindow(30, 95, max_samples=100, clock=clock)
    for n in range(10_000):
        window.add(n / 10_000)
    value, count = window.report()
    assert count == 100
    assert len(window._samples) == 100
    assert value == percentile([n / 10_000 for n in range(9_900, 10_000)], 95)


@pytest.mark.parametrize(
    ("window_s", "q", "max_samples", "message"),
    [
        (0, 95, 10, "window_s"),
        (30, 0, 10, "percentile_q"),
        (30, 101, 10, "percentile_q"),
        (30, 95, 0, "max_samples"),
    ],
)
def test_a_window_that_cannot_report_is_refused(
    window_s: float, q: float, max_samples: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LatencyWindow(window_s, q, max_samples)


# (times of a stream's outputs, in seconds) -> its inter-token latency
STREAMS = [
    # no output, or one: no gap to measure
    ([], None),
    ([0.5], None),
    # two outputs 40 ms apart
    ([0.0, 0.04], 0.04),
    # five outputs over 0.2 s: four gaps of 50 ms on average, however uneven
    ([0.0, 0.01, 0.02, 0.15, 0.2], 0.05),
]


@pytest.mark.parametrize(("times", "want"), STREAMS)
def test_a_streams_inter_token_latency_is_its_mean_gap(
    times: list[float], want: float | None
) -> None:
    clock = Clock()
    start = clock.now
    stream = StreamClock(clock=clock)
    for offset in times:
        clock.now = start + offset
        stream.tick()
    got = stream.inter_token_s()
    assert got == (None if want is None else pytest.approx(want))
