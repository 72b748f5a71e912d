"""A replica's latency over a sliding window, as the latency policy reads it: one sample per
request (prefill: its time to the one token; decode: one stream's mean inter-token latency),
reported as a percentile and a sample count.

Pure (no Ray import), so that it is unit-tested without a cluster
(tests/serve_extensions/test_latency_window.py); the servers that feed it are
latency_servers.py.

Why this shape, from what reads it (latency_autoscaler.py, Ray 2.58):
- Serve calls a replica's `record_autoscaling_stats()` every look_back_period_s x 0.2
  (serve/_private/replica.py start_metrics_pusher, RAY_SERVE_AUTOSCALING_METRIC_RECORD_INTERVAL_
  FACTOR) and the controller averages each replica's reported points over the look-back window
  (aggregated_metrics). A window as long as look_back_period_s makes the sample count what the
  policy's min_samples means: the requests of the look-back window.
- The percentile is the objective's (serving.scaling.ttft / itl .percentile), computed with the
  policy's own rule (latency_policy.percentile, nearest rank): one rule in one place.
- Memory is bounded: at most `max_samples` samples (a deque with a maxlen); past that the oldest
  go first, so a replica busier than max_samples requests per window reports the percentile of
  its latest max_samples requests. Adding is O(1) on the event loop; a report sorts at most
  max_samples floats (4,096: well under a millisecond) once per record interval.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from serve_extensions.latency_policy import percentile

# Samples one window keeps: a replica completing more than this many requests per look-back
# window (136/s over Serve's default 30 s) reports its latest ones.
MAX_SAMPLES = 4096


class LatencyWindow:
    """Latency samples (seconds) of the last `window_s` seconds, at most `max_samples` of them."""

    def __init__(
        self,
        window_s: float,
        percentile_q: float,
        max_samples: int = MAX_SAMPLES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_s <= 0 or max_samples < 1 or not 0 < percentile_q <= 100:
            raise ValueError(
                f"window_s ({window_s}) must be > 0, max_samples ({max_samples}) >= 1 and "
                f"percentile_q ({percentile_q}) in (0, 100]"
            )
        self.window_s = window_s
        self.percentile_q = percentile_q
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)

    def add(self, latency_s: float) -> None:
        self._samples.append((self._clock(), latency_s))

    def report(self) -> tuple[float | None, int]:
        """The percentile of the window's samples (None without any) and how many there are."""
        horizon = self._clock() - self.window_s
        while self._samples and self._samples[0][0] < horizon:
            self._samples.popleft()
        values = [value for _, value in self._samples]
        return percentile(values, self.percentile_q), len(values)


class StreamClock:
    """One stream's inter-token latency: the time from its first output to its last, over the
    gaps between them, (last - first) / (outputs - 1). A mean per stream, so that a long answer
    counts once, as a request does in the policy's sample count.

    Outputs are what the engine yields per step (vLLM: one server-sent event per engine step,
    one token without speculative decoding). A chat stream's role chunk and a usage chunk are
    outputs too: they come with the first and the last token, so an answer of n tokens reads
    up to 2/n low; vLLM's closing "[DONE]" event is left out by the caller."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.first: float | None = None
        self.last: float | None = None
        self.outputs = 0

    def tick(self) -> None:
        now = self._clock()
        if self.first is None:
            self.first = now
        self.last = now
        self.outputs += 1

    def inter_token_s(self) -> float | None:
        """None for a stream of fewer than two outputs: it has no gap."""
        if self.outputs < 2 or self.first is None or self.last is None:
            return None
        return (self.last - self.first) / (self.outputs - 1)
