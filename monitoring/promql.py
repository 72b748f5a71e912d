"""The PromQL the dashboard and the alert rules share, so that both read the same numbers."""

from __future__ import annotations

from catalog.metrics import ROLE_LABEL, PrometheusMetric

RATE_WINDOW = "5m"


def quantile(metric: PrometheusMetric, q: float, role: str, window: str = RATE_WINDOW) -> str:
    """The q-quantile of a histogram over every pod of one side."""
    buckets = metric.selector(series="_bucket", **{ROLE_LABEL: role})
    return f"histogram_quantile({q}, sum by (le) (rate({buckets}[{window}])))"


def total(metric: PrometheusMetric, role: str) -> str:
    """A gauge summed over every pod of one side."""
    return f"sum({metric.selector(**{ROLE_LABEL: role})})"


def peak(metric: PrometheusMetric, role: str) -> str:
    """A gauge's highest value among the pods of one side."""
    return f"max({metric.selector(**{ROLE_LABEL: role})})"


def increase(metric: PrometheusMetric, role: str, window: str = RATE_WINDOW) -> str:
    """How much a counter grew over the window, summed over one side."""
    return f"sum(increase({metric.selector(**{ROLE_LABEL: role})}[{window}]))"


def rising(expression: str, window: str = RATE_WINDOW) -> str:
    """True while the expression's per-second slope over the window is positive."""
    return f"deriv(({expression})[{window}:1m]) > 0"
