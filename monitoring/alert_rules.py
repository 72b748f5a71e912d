"""Alert rules that Amazon Managed Service for Prometheus evaluates on the Ray and vLLM metrics,
with thresholds from the configuration. Histogram quantiles need PromQL, which is why these are
Prometheus rules and not CloudWatch alarms (docs/observability.md, "Observability and
self-healing")."""

from __future__ import annotations

from typing import Any

from app_config import Settings
from app_config.node_labels import GPU_ROLES
from catalog.metrics import (
    INTER_TOKEN_LATENCY,
    NIXL_FAILED_TRANSFERS,
    REQUESTS_WAITING,
    SCRAPE_UP,
    SERVE_HEALTHY_REPLICAS,
    SERVE_REPLICA_STARTS,
    SERVE_TARGET_REPLICAS,
    TTFT,
)
from monitoring import promql
from monitoring.data_parallel import data_parallel_sides
from monitoring.scrape_config import AUTOSCALER_JOB_NAME

GROUP_NAME = "llm-serving"
EVALUATION_INTERVAL = "1m"
# A side whose metrics have been missing this long pages: every other rule is blind meanwhile.
METRICS_MISSING_FOR = "10m"
# A DP group's ranks become healthy as each one's engine is ready, so the healthy count passes
# through partial groups while a group starts; ten minutes of a partial group is not a start.
PARTIAL_GROUP_MINUTES = 10
# Long enough for a scale-down's target drop to be scraped with the healthy ranks it removes
# (both from the Serve controller, one export apart at worst).
DP_GROUP_RESTARTING_FOR = "1m"


def ttft_p95_estimate() -> str:
    """Client-seen time to first token is prefill's (the prompt) plus decode's (the KV pull
    and first step). The sum of the two sides' p95s estimates the client's p95; it is not a
    bound (slow prefills and slow pulls on different requests add up to more than 5% slow
    requests), which is why docs/observability.md calls it an estimate."""
    return f"{promql.quantile(TTFT, 0.95, 'prefill')} + {promql.quantile(TTFT, 0.95, 'decode')}"


def render_alert_rules(settings: Settings) -> dict[str, Any]:
    alarms = settings.observability.alarms
    service = settings.serving.name

    def labels() -> dict[str, str]:  # a fresh dict per rule: no YAML anchors in the console
        return {"severity": "page", "service": service}

    queue_minutes = alarms.decode_queue_growth_minutes
    waiting = promql.total(REQUESTS_WAITING, "decode")
    rules = [
        {
            "alert": "NixlKvTransfersFailing",
            "expr": promql.grew(NIXL_FAILED_TRANSFERS, "decode"),
            "labels": labels(),
            "annotations": {
                "summary": f"{service}: NIXL KV transfers failed on decode in the last 5 minutes",
                "runbook": "docs/observability.md, 'NixlKvTransfersFailing'",
            },
        },
        {
            "alert": "DecodeQueueGrowing",
            "expr": f"{waiting} > 0 and {promql.rising(waiting)}",
            "for": f"{queue_minutes}m",
            "labels": labels(),
            "annotations": {
                "summary": f"{service}: decode's waiting requests have grown for "
                f"{queue_minutes} minutes",
                "runbook": "docs/observability.md, 'DecodeQueueGrowing'",
            },
        },
        {
            "alert": "TimeToFirstTokenAboveObjective",
            "expr": f"({ttft_p95_estimate()}) > {alarms.ttft_p95_objective_seconds}",
            "for": "5m",
            "labels": labels(),
            "annotations": {
                "summary": f"{service}: time to first token p95 above "
                f"{alarms.ttft_p95_objective_seconds} s",
                "runbook": "docs/observability.md, 'TimeToFirstTokenAboveObjective'",
            },
        },
        {
            "alert": "InterTokenLatencyAboveObjective",
            "expr": f"{promql.quantile(INTER_TOKEN_LATENCY, 0.95, 'decode')} > "
            f"{alarms.itl_p95_objective_seconds}",
            "for": "5m",
            "labels": labels(),
            "annotations": {
                "summary": f"{service}: inter-token latency p95 above "
                f"{alarms.itl_p95_objective_seconds} s",
                "runbook": "docs/observability.md, 'InterTokenLatencyAboveObjective'",
            },
        },
    ]
    shortfall = alarms.capacity_shortfall_minutes
    rules.append(
        {
            "alert": "ServingCapacityShortfall",
            "expr": " or ".join(
                promql.replica_shortfall(SERVE_TARGET_REPLICAS, SERVE_HEALTHY_REPLICAS, role)
                for role in GPU_ROLES
            ),
            "for": f"{shortfall}m",
            "labels": labels(),
            "annotations": {
                "summary": f"{service}: a side has wanted more replicas than it has healthy "
                f"for {shortfall} minutes",
                "description": "Capacity that did not come, or a node without working EFA: a "
                "worker pod of the side that fails its `efa-devices` init container (`Init:Error`; "
                "its log: `EFA check failed on the <side> node NODE`, with the devices expected "
                "and found) or a replica that crash-loops with `nixlNotFoundError: "
                "NIXL_ERR_NOT_FOUND` at start. KubeRay recreates the pod, often on the same node: "
                "`kubectl cordon NODE`, then measure it with "
                "`pdctl efa-check --prefill-node/--decode-node NODE`.",
                "runbook": "docs/observability.md, 'ServingCapacityShortfall'",
            },
        }
    )
    watched = [
        role for role, group in settings.gpu_nodes.groups().items() if group.scaling.min_size
    ]
    if watched:
        rules.append(
            {
                "alert": "ServingMetricsMissing",
                "expr": " or ".join(promql.nothing_scraped(SCRAPE_UP, role) for role in watched),
                "for": METRICS_MISSING_FOR,
                "labels": labels(),
                "annotations": {
                    "summary": f"{service}: no metrics scraped from a side for "
                    f"{METRICS_MISSING_FOR}; the other alerts cannot fire meanwhile",
                    "runbook": "docs/observability.md, 'ServingMetricsMissing'",
                },
            }
        )
    rules.extend(_dp_group_rules(settings, labels()))
    rules.append(
        {
            "alert": "RayAutoscalerDown",
            "expr": f"absent({SCRAPE_UP.selector(job=AUTOSCALER_JOB_NAME)} == 1)",
            "for": METRICS_MISSING_FOR,
            "labels": labels(),
            "annotations": {
                "summary": f"{service}: Ray's autoscaler (the head pod's sidecar) has not "
                f"answered for {METRICS_MISSING_FOR}; no worker pod is added or removed "
                "meanwhile",
                "runbook": "docs/observability.md, 'RayAutoscalerDown'",
            },
        }
    )
    return {"groups": [{"name": GROUP_NAME, "interval": EVALUATION_INTERVAL, "rules": rules}]}


def dp_group_restarting(settings: Settings) -> str | None:
    """Per side with DP groups and Ray cluster: a group that was healthy went down, ranks
    started beyond what scale-ups explain while the side is short, or a partial group that
    lasts. The first two look back ``capacity_shortfall_minutes``: a group down longer than
    that is ServingCapacityShortfall's. None when no side runs DP groups."""
    window = f"{settings.observability.alarms.capacity_shortfall_minutes}m"
    target, healthy = SERVE_TARGET_REPLICAS, SERVE_HEALTHY_REPLICAS
    sides = []
    for role, ranks in data_parallel_sides(settings).items():
        signs = (
            promql.healthy_ranks_lost(target, healthy, role, window),
            promql.restarts_unexplained(SERVE_REPLICA_STARTS, target, healthy, role, window),
            promql.partial_groups(target, healthy, role, ranks, f"{PARTIAL_GROUP_MINUTES}m"),
        )
        sides.append(promql.with_role(" or ".join(f"({sign})" for sign in signs), role))
    return " or ".join(sides) if sides else None


def _dp_group_rules(settings: Settings, labels: dict[str, str]) -> list[dict[str, Any]]:
    expression = dp_group_restarting(settings)
    if expression is None:
        return []
    service = settings.serving.name
    return [
        {
            "alert": "DPGroupRestarting",
            "expr": expression,
            "for": DP_GROUP_RESTARTING_FOR,
            "labels": labels,
            "annotations": {
                "summary": f"{service}: a data parallel group of a side is restarting "
                "(Ray Serve restarts every rank of a group when one fails)",
                "description": "One failing rank restarts its whole group: find the rank "
                "that failed first in the Serve controller's log (`Replica ... failed health "
                "check` / `belongs to gang ... Forcefully stopping`), its pod and node, and "
                "measure the node's EFA with `pdctl efa-check --prefill-node/--decode-node "
                "NODE`.",
                "runbook": "docs/observability.md, 'DPGroupRestarting'",
            },
        }
    ]
