"""A CloudWatch metric from catalog/metrics.py, refused at synth when asked for with dimensions
its emitter does not publish (a graph or alarm on them would stay empty forever)."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from catalog.metrics import CloudWatchMetric


def catalog_metric(
    metric: CloudWatchMetric,
    dimensions: dict[str, str],
    *,
    statistic: str,
    period: Duration,
    label: str | None = None,
) -> cloudwatch.Metric:
    metric.require_dimensions(tuple(dimensions))
    return cloudwatch.Metric(
        namespace=metric.namespace,
        metric_name=metric.name,
        dimensions_map=dimensions,
        statistic=statistic,
        period=period,
        label=label,
    )
