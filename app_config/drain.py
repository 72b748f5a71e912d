"""How a Ray worker pod leaves without cutting the streams it serves, as numbers that must agree
with each other: the pod's preStop waits for its Serve replicas to go idle, Kubernetes waits for
the preStop and Ray's own drain, and the load balancer keeps established connections that long.

Sources: Kubernetes pod lifecycle (terminationGracePeriodSeconds counts the preStop hook and the
time after SIGTERM together; default 30 s); Ray 2.58 ``ray/_private/node.py`` (on SIGTERM,
``ray start --block`` drains its node for RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S, default 30 s,
then kills its processes); ELB user guide (a deregistered target keeps its connections for the
deregistration delay, 0-3600 s); KubeRay v1.7.0 ``common/pod.go`` (configureGCSFaultTolerance:
a worker's RAY_gcs_rpc_server_reconnect_timeout_s becomes 600 s only with GCS fault tolerance
and only when the pod does not set it; Ray's own default is 60 s, after which a raylet that
cannot reach the GCS exits and takes the node's replicas with it).
"""

from __future__ import annotations

# Endpoint removal has to reach kube-proxy and the load balancer controller before the wait for
# idleness means anything: requests keep arriving for a few seconds after a pod turns Terminating.
SETTLE_SECONDS = 15
POLL_SECONDS = 5
RAY_SIGTERM_DRAIN_SECONDS = 30  # Ray 2.58's default; left as is
MARGIN_SECONDS = 15
GCS_RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
RAY_GCS_RECONNECT_DEFAULT_SECONDS = 60  # Ray 2.58 ray_config_def.h
KUBERAY_GCS_FT_RECONNECT_SECONDS = 600  # KubeRay v1.7.0 DefaultWorkerRayGcsReconnectTimeoutS


def termination_grace_seconds(drain_timeout: int) -> int:
    """Covers the longest preStop (settle plus the drain timeout) and Ray's drain after it."""
    return SETTLE_SECONDS + drain_timeout + RAY_SIGTERM_DRAIN_SECONDS + MARGIN_SECONDS


def deregistration_delay_seconds(drain_timeout: int) -> int:
    """A stream that started just before the pod left may run the whole drain timeout."""
    return SETTLE_SECONDS + drain_timeout


def gcs_reconnect_timeout_seconds(drain_timeout: int, *, gcs_fault_tolerance: bool) -> int:
    """A worker outlives its head by its whole termination grace period: deleting a Ray cluster
    deletes the head with the workers, and the head (no preStop, default grace) is gone at once.
    With GCS fault tolerance never below KubeRay's 600 s, which our setting would replace: a
    restarted head must find its workers still there."""
    floor = KUBERAY_GCS_FT_RECONNECT_SECONDS if gcs_fault_tolerance else 0
    return max(termination_grace_seconds(drain_timeout), floor)
