"""A Helm release of a chart pinned in catalog/helm_charts.py."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_eks_v2 as eks

from catalog.helm_charts import HelmChartRef
from constructs import Construct


def helm_release(
    scope: Construct,
    construct_id: str,
    *,
    cluster: eks.ICluster,
    chart: HelmChartRef,
    values: dict[str, Any],
    wait: bool = True,
) -> eks.HelmChart:
    """Release name = chart name, in the chart's namespace (created if missing)."""
    return eks.HelmChart(
        scope,
        construct_id,
        cluster=cluster,
        repository=chart.repository,
        chart=chart.chart,
        version=chart.version,
        namespace=chart.namespace,
        create_namespace=True,
        release=chart.chart,
        values=values,
        wait=wait,
    )
