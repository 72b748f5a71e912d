"""Where the amazon-cloudwatch-observability add-on writes: the agent's EMF metrics go to the
performance group, Fluent Bit's container, data plane and host logs to the others
(CloudWatch user guide, "Container Insights log groups"). The names are fixed by the add-on."""

from __future__ import annotations

PERFORMANCE = "performance"
CONTAINER_LOGS = ("application", "dataplane", "host")


def log_group_name(cluster_name: str, kind: str) -> str:
    return f"/aws/containerinsights/{cluster_name}/{kind}"


def log_group_kinds(container_logs: bool) -> tuple[str, ...]:
    """The groups a deployment writes to; the stack creates exactly these."""
    return (PERFORMANCE, *(CONTAINER_LOGS if container_logs else ()))
