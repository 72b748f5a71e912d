"""The PromQL the dashboard and the alert rules share, so that both read the same numbers."""

from __future__ import annotations

import re

from catalog.metrics import DEPLOYMENT_PREFIX, ROLE_LABEL, PrometheusMetric

RATE_WINDOW = "5m"


def quantile(
    metric: PrometheusMetric,
    q: float,
    role: str,
    window: str = RATE_WINDOW,
    by: tuple[str, ...] = (),
) -> str:
    """The q-quantile of a histogram over every pod of one side, one series per ``by`` value."""
    buckets = metric.selector(series="_bucket", **{ROLE_LABEL: role})
    labels = ", ".join(("le", *by))
    return f"histogram_quantile({q}, sum by ({labels}) (rate({buckets}[{window}])))"


def total(metric: PrometheusMetric, role: str) -> str:
    """A gauge summed over every pod of one side."""
    return f"sum({metric.selector(**{ROLE_LABEL: role})})"


def peak(metric: PrometheusMetric, role: str) -> str:
    """A gauge's highest value among the pods of one side."""
    return f"max({metric.selector(**{ROLE_LABEL: role})})"


def increase(metric: PrometheusMetric, role: str, window: str = RATE_WINDOW) -> str:
    """How much a counter grew over the window, summed over one side."""
    return f"sum(increase({metric.selector(**{ROLE_LABEL: role})}[{window}]))"


def grew(metric: PrometheusMetric, role: str, window: str = RATE_WINDOW) -> str:
    """True when a counter grew over the window, including a series born within it: Ray exports
    a labelled counter only from its first increment, which increase() cannot see."""
    selector = metric.selector(**{ROLE_LABEL: role})
    born = f"sum({selector} unless {selector} offset {window})"
    return f"({increase(metric, role, window)} > 0) or ({born} > 0)"


def rising(expression: str, window: str = RATE_WINDOW) -> str:
    """True while the expression's per-second slope over the window is positive."""
    return f"deriv(({expression})[{window}:1m]) > 0"


def nothing_scraped(up: PrometheusMetric, role: str) -> str:
    """A series labelled with the side when not one of its targets was scraped successfully,
    whether the targets fail (up == 0) or have vanished (no up series at all). absent() of a
    comparison carries no labels, so the side is written back on."""
    missing = f"absent({up.selector(**{ROLE_LABEL: role})} == 1)"
    return f'label_replace({missing}, "{ROLE_LABEL}", "{role}", "", "")'


def deployment_matcher(role: str) -> str:
    return f'deployment=~"{re.escape(DEPLOYMENT_PREFIX[role])}.*"'


def target_replicas(target: PrometheusMetric, role: str, by: tuple[str, ...] = ()) -> str:
    """Replicas Serve's autoscaler wants for the side: each Ray cluster's Serve controller
    exports its own target; summed by ``by``, or into one number."""
    return _sum(f"max by (ray_cluster) ({target.name}{{{deployment_matcher(role)}}})", by)


def healthy_replicas(healthy: PrometheusMetric, role: str, by: tuple[str, ...] = ()) -> str:
    return _sum(f"{healthy.name}{{{deployment_matcher(role)}}}", by)


def worker_pods(gauge: PrometheusMetric, role: str) -> str:
    """A Ray autoscaler gauge of the side's worker group, summed over Ray clusters."""
    return f'sum({gauge.name}{{NodeType="{role}"}})'


def replica_shortfall(target: PrometheusMetric, healthy: PrometheusMetric, role: str) -> str:
    """Per Ray cluster: the side wants more replicas than are healthy. A cluster without any
    healthy-replica series (none started yet) counts as zero healthy, not as unknown."""
    wanted = target_replicas(target, role, by=("ray_cluster",))
    have = healthy_replicas(healthy, role, by=("ray_cluster",))
    return f'label_replace({wanted} > ({have} or {wanted} * 0), "{ROLE_LABEL}", "{role}", "", "")'


def _sum(expression: str, by: tuple[str, ...]) -> str:
    return f"sum by ({', '.join(by)}) ({expression})" if by else f"sum({expression})"
