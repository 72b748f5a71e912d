"""The PromQL the dashboard and the alert rules share, so that both read the same numbers."""

from __future__ import annotations

import re

from catalog.metrics import DEPLOYMENT_PREFIX, RANK_LABELS, ROLE_LABEL, PrometheusMetric

RATE_WINDOW = "5m"
CLUSTER = ("ray_cluster",)  # the scraper's label for the pod's Ray cluster (scrape_config.py)


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


def target_replicas(
    target: PrometheusMetric, role: str, by: tuple[str, ...] = (), offset: str = ""
) -> str:
    """Replicas Serve's autoscaler wants for the side: each Ray cluster's Serve controller
    exports its own target; summed by ``by``, or into one number. ``offset``: as it was then."""
    selector = _deployment_selector(target, role, offset)
    return _sum(f"max by (ray_cluster) ({selector})", by)


def latest_decision(metric: PrometheusMetric, role: str, by: tuple[str, ...] = ()) -> str:
    """A gauge the app's latency policy sets in the Serve controller, for the side: the highest
    over Ray clusters (during an upgrade both controllers decide), per ``by`` value."""
    return (
        f"max by ({', '.join(by)}) ({_deployment_selector(metric, role)})"
        if by
        else (f"max({_deployment_selector(metric, role)})")
    )


def healthy_replicas(
    healthy: PrometheusMetric, role: str, by: tuple[str, ...] = (), offset: str = ""
) -> str:
    return _sum(_deployment_selector(healthy, role, offset), by)


def share_of(part: PrometheusMetric, whole: PrometheusMetric, role: str) -> str:
    """One counter's rate over another's, for the side a Serve deployment label names (the
    series come from the pods that route to the side, whatever their own role)."""

    def rate(metric: PrometheusMetric) -> str:
        return f"sum(rate({metric.stored_name}{{{deployment_matcher(role)}}}[{RATE_WINDOW}]))"

    return f"{rate(part)} / {rate(whole)}"


def side_rate(metric: PrometheusMetric, role: str) -> str:
    """A counter's per-second growth over the rate window, summed over the side's pods."""
    return f"sum(rate({metric.selector(**{ROLE_LABEL: role})}[{RATE_WINDOW}]))"


def side_ratio(parts: tuple[PrometheusMetric, ...], whole: PrometheusMetric, role: str) -> str:
    """What the counters ``parts`` grew by over what ``whole`` grew by in the rate window,
    summed over the side's pods: a hit rate of the side's engines. While ``whole`` does not
    grow (no requests) the line has no value rather than a division by zero."""
    numerator = " + ".join(side_rate(part, role) for part in parts)
    if len(parts) > 1:
        numerator = f"({numerator})"
    return f"{numerator} / ({side_rate(whole, role)} > 0)"


def _deployment_selector(metric: PrometheusMetric, role: str, offset: str = "") -> str:
    selector = f"{metric.name}{{{deployment_matcher(role)}}}"
    return f"{selector} offset {offset}" if offset else selector


def per_rank(metric: PrometheusMetric, role: str, aggregation: str = "sum") -> str:
    """A vLLM gauge with one series per engine: each data parallel rank is one Serve replica
    (``ReplicaId``) whose engine index is its rank in the group (``engine``)."""
    return f"{aggregation} by ({', '.join(RANK_LABELS)}) ({metric.selector(**{ROLE_LABEL: role})})"


def ranks_started(starts: PrometheusMetric, role: str, window: str) -> str:
    """Per Ray cluster: Serve replicas (ranks) of the side whose actors started within the
    window. Each start is a new series born at 1 (a new replica id), so a start is a series
    that exists in the window and did not exist at its beginning; one whose pod has gone since
    still counts (last_over_time)."""
    series = f"{starts.stored_name}{{{deployment_matcher(role)}}}"
    born = f"last_over_time({series}[{window}]) unless {series} offset {window}"
    return f"count by (ray_cluster) ({born})"


def failed_ranks(
    failures: PrometheusMetric, starts: PrometheusMetric, role: str, window: str
) -> str:
    """Each replica of the side that failed a health check in the window (the controller's
    count, on the head), with the pod and node its start counter was exported from: the rank
    whose failure restarted its group, and where it ran. A counter born with its first failure
    counts from that failure."""
    failed = f"{failures.stored_name}{{{deployment_matcher(role)}}}"
    counted = f"(last_over_time({failed}[{window}]) - ({failed} offset {window} or {failed} * 0))"
    where = f"{starts.stored_name}{{{deployment_matcher(role)}}}"
    placed = f"max by (replica, pod, node) (last_over_time({where}[{window}]))"
    return f"sum by (replica) ({counted} > 0) * on (replica) group_left (pod, node) {placed}"


def healthy_ranks_lost(
    target: PrometheusMetric, healthy: PrometheusMetric, role: str, window: str
) -> str:
    """Per Ray cluster: fewer healthy ranks than the side had at some point in the window,
    and fewer than the target at its lowest in the window. A group that was healthy went down
    (RESTART_GANG stops every rank of it at once); a scale-down lowers the target first, and a
    scale-down followed by a scale-up leaves the target's low at the healthy count."""
    have = healthy_replicas(healthy, role, by=CLUSTER)
    high = f"max_over_time(({have})[{window}:1m])"
    lowest_target = f"min_over_time(({target_replicas(target, role, by=CLUSTER)})[{window}:1m])"
    return f"{have} < (({high} <= {lowest_target}) or {lowest_target})"


def restarts_unexplained(
    starts: PrometheusMetric,
    target: PrometheusMetric,
    healthy: PrometheusMetric,
    role: str,
    window: str,
) -> str:
    """Per Ray cluster: more ranks started in the window than scale-ups explain, while the
    side is short of healthy ranks. Explained: every rise of the target within the window (a
    target series born within it counts whole: a first deploy or a new Ray cluster), plus the
    ranks still missing at the window's start (a scale-up whose nodes took longer than the
    window). A group that fails while starting and starts again has no healthy rank to lose;
    this is what sees it."""
    wanted = target_replicas(target, role, by=CLUSTER)
    before = target_replicas(target, role, by=CLUSTER, offset="1m")
    raised = f"sum_over_time((clamp_min({wanted} - {before}, 0) or {wanted})[{window}:1m])"
    wanted_then = target_replicas(target, role, by=CLUSTER, offset=window)
    healthy_then = healthy_replicas(healthy, role, by=CLUSTER, offset=window)
    missing_then = f"clamp_min({wanted_then} - ({healthy_then} or {wanted_then} * 0), 0)"
    explained = f"(({raised}) + {missing_then}) or ({raised})"
    have = healthy_replicas(healthy, role, by=CLUSTER)
    short = f"{wanted} > ({have} or {wanted} * 0)"
    return f"({ranks_started(starts, role, window)} > ({explained})) and ({short})"


def partial_groups(
    target: PrometheusMetric, healthy: PrometheusMetric, role: str, ranks: int, window: str
) -> str:
    """Per Ray cluster: the healthy ranks have not been a whole number of groups at any minute
    of the window. Serve starts and stops a gang whole, so a remainder that lasts is a rank
    down that its group's restart has not replaced. A minute without any healthy rank (before
    the first one) is a whole number: zero."""
    have = healthy_replicas(healthy, role, by=CLUSTER)
    none = f"{target_replicas(target, role, by=CLUSTER)} * 0"
    return f"min_over_time((({have} % {ranks}) or {none})[{window}:1m]) > 0"


def with_role(expression: str, role: str) -> str:
    """Writes the side onto a per-cluster expression's series (the head's series carry the
    head's role label, not the side's)."""
    return f'label_replace({expression}, "{ROLE_LABEL}", "{role}", "", "")'


def worker_pods(gauge: PrometheusMetric, role: str) -> str:
    """A Ray autoscaler gauge of the side's worker group, summed over Ray clusters."""
    return f'sum({gauge.name}{{NodeType="{role}"}})'


def replica_shortfall(target: PrometheusMetric, healthy: PrometheusMetric, role: str) -> str:
    """Per Ray cluster: the side wants more replicas than are healthy. A cluster without any
    healthy-replica series (none started yet) counts as zero healthy, not as unknown."""
    wanted = target_replicas(target, role, by=CLUSTER)
    have = healthy_replicas(healthy, role, by=CLUSTER)
    return with_role(f"{wanted} > ({have} or {wanted} * 0)", role)


def _sum(expression: str, by: tuple[str, ...]) -> str:
    return f"sum by ({', '.join(by)}) ({expression})" if by else f"sum({expression})"
