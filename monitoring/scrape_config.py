"""The managed scraper's Prometheus configuration: the RayService's pods, their metrics port,
each series labelled with the pod's side (prefill, decode or head), and only the metrics the
dashboard and alerts read (samples are what Amazon Managed Service for Prometheus bills)."""

from __future__ import annotations

import re
from typing import Any

from app_config import Settings
from app_config.node_labels import GPU_ROLES
from app_config.node_labels import ROLE_LABEL as POD_ROLE_LABEL
from catalog.metrics import (
    ROLE_LABEL,
    SCRAPED,
    SCRAPED_FOR_DATA_PARALLEL,
    SCRAPED_FOR_KV_OFFLOAD,
    SCRAPED_FOR_LATENCY_POLICY,
    SCRAPED_FOR_PREFIX_ROUTING,
    PrometheusMetric,
)
from monitoring.data_parallel import data_parallel_sides
from serving_manifests.names import (
    AUTOSCALER_METRICS_PORT,
    METRICS_PORT_NAME,
    RAYSERVICE_LABEL,
)

JOB_NAME = "ray"
AUTOSCALER_JOB_NAME = "ray-autoscaler"
HEAD_ROLE = "head"


def meta_label(pod_label: str) -> str:
    """The discovery label Prometheus gives a pod label (non-word characters become _)."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", pod_label)


def kept_metrics(settings: Settings) -> tuple[PrometheusMetric, ...]:
    """What the dashboard and the alert rules of this configuration read."""
    return (
        SCRAPED
        + (SCRAPED_FOR_DATA_PARALLEL if data_parallel_sides(settings) else ())
        + (SCRAPED_FOR_PREFIX_ROUTING if prefix_routed_sides(settings) else ())
        + (SCRAPED_FOR_KV_OFFLOAD if kv_offload_sides(settings) else ())
        + (SCRAPED_FOR_LATENCY_POLICY if settings.serving.scaling.policy == "latency" else ())
    )


def prefix_routed_sides(settings: Settings) -> tuple[str, ...]:
    """The sides whose replicas the app's prefix-aware router picks."""
    return tuple(
        role
        for role in GPU_ROLES
        if settings.serving.engine(role).request_router == "prefix_affinity"
    )


def kv_offload_sides(settings: Settings) -> tuple[str, ...]:
    """The sides with a CPU KV offload tier (prefill only: app_config/rules/kv_transfer.py)."""
    return tuple(
        role for role in GPU_ROLES if settings.serving.engine(role).kv_offload_gib_per_gpu > 0
    )


def kept_series_regex(settings: Settings) -> str:
    names = sorted(name for metric in kept_metrics(settings) for name in metric.queried_names())
    return "|".join(re.escape(name) for name in names)


def render_scrape_config(settings: Settings) -> dict[str, Any]:
    interval = f"{settings.observability.scrape_interval_seconds}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": "10s"},
        "scrape_configs": [
            {
                "job_name": JOB_NAME,
                "kubernetes_sd_configs": _ray_pods(settings),
                "relabel_configs": _ray_metrics_ports(settings) + _pod_labels(),
                "metric_relabel_configs": _kept(settings),
            },
            {
                # Ray's autoscaler, in the head pod, on a port no container declares: the
                # head's metrics-port target, readdressed to the autoscaler's port.
                "job_name": AUTOSCALER_JOB_NAME,
                "kubernetes_sd_configs": _ray_pods(settings),
                "relabel_configs": [
                    *_ray_metrics_ports(settings),
                    {
                        "action": "keep",
                        "source_labels": [meta_label("ray.io/node-type")],
                        "regex": HEAD_ROLE,
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_ip"],
                        "target_label": "__address__",
                        "replacement": f"$1:{AUTOSCALER_METRICS_PORT}",
                    },
                    *_pod_labels(),
                ],
                "metric_relabel_configs": _kept(settings),
            },
        ],
    }


def _ray_pods(settings: Settings) -> list[dict[str, Any]]:
    return [{"role": "pod", "namespaces": {"names": [settings.serving.namespace]}}]


def _ray_metrics_ports(settings: Settings) -> list[dict[str, Any]]:
    """One target per Ray pod of this RayService: its metrics port."""
    return [
        {
            "action": "keep",
            "source_labels": [meta_label(RAYSERVICE_LABEL)],
            "regex": re.escape(settings.serving.name),
        },
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": METRICS_PORT_NAME,
        },
    ]


def _pod_labels() -> list[dict[str, Any]]:
    return [
        {"source_labels": [meta_label(POD_ROLE_LABEL)], "target_label": ROLE_LABEL},
        {
            "source_labels": [meta_label("ray.io/node-type")],
            "regex": HEAD_ROLE,
            "target_label": ROLE_LABEL,
            "replacement": HEAD_ROLE,
        },
        {"source_labels": [meta_label("ray.io/cluster")], "target_label": "ray_cluster"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
    ]


def _kept(settings: Settings) -> list[dict[str, Any]]:
    regex = kept_series_regex(settings)
    return [{"action": "keep", "source_labels": ["__name__"], "regex": regex}]
