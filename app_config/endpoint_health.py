"""How fast the load balancer trusts a new Serve proxy, and what that means for switching Ray
clusters. The configuration validates the old cluster's deletion delay against it; the endpoint
construct sets the target group from it. NLB limits: interval 5-300 s, thresholds 2-10, HTTP
timeout 2-120 s (AWS::ElasticLoadBalancingV2::TargetGroup schema; ELB user guide, "Health checks
for Network Load Balancer target groups")."""

from __future__ import annotations

# The proxy's own health path (Ray Serve docs, "Health checks"). What decides whether a pod gets
# traffic at all is its readiness (manifests/rayservice.yaml): the load balancer registers only
# ready endpoints (AWS Load Balancer Controller, TargetGroupBinding with IP targets).
PROXY_HEALTH_PATH = "/-/healthz"
INTERVAL_SECONDS = 10
TIMEOUT_SECONDS = 5
HEALTHY_THRESHOLD = 2  # NLB's minimum: a new target is healthy 20 s after its first check
UNHEALTHY_THRESHOLD = 2
# From a pod turning ready to its target's first health check: the controller's reconcile of the
# endpoints and ELB's registration. An estimate with margin (NLB registrations are known to take
# up to about a minute and a half), not a guarantee.
REGISTRATION_SECONDS = 90


def seconds_until_new_targets_healthy() -> int:
    """From the new Ray cluster's workers turning ready to their targets taking traffic."""
    return REGISTRATION_SECONDS + HEALTHY_THRESHOLD * INTERVAL_SECONDS
