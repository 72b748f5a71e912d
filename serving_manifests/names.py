"""Names and labels the serving manifests share, derived from the configuration in one place."""

from __future__ import annotations

from dataclasses import dataclass

from app_config import Settings

# Every pod of the RayService carries this label with the RayService's name: the network
# policies and the endpoint Service select by it.
RAYSERVICE_LABEL = "llm-serving/rayservice"
# Separate identities: KubeRay binds its autoscaler RBAC to the head's service account, and only
# the GPU workers, which load the model, get the model's IAM role.
HEAD_SERVICE_ACCOUNT = "ray-head"
WORKER_SERVICE_ACCOUNT = "ray-worker"
SERVE_PORT = 8000
DASHBOARD_PORT = 8265
HF_TOKEN_MOUNT = "/var/run/secrets/huggingface"
HF_TOKEN_ALIAS = "token"
HF_TOKEN_PROVIDER_CLASS = "hf-token"


@dataclass(frozen=True)
class EndpointBinding:
    """What the TargetGroupBinding needs from the load balancer CloudFormation created."""

    target_group_arn: str
    load_balancer_security_group_id: str


def endpoint_binding_name(settings: Settings) -> str:
    return f"{settings.serving.name}-endpoint"


def kuberay_serve_service_name(settings: Settings) -> str:
    """The ClusterIP Service KubeRay itself creates for Serve (port 8000)."""
    return f"{settings.serving.name}-serve-svc"


def endpoint_source_cidrs(settings: Settings) -> list[str]:
    """Who may reach the endpoint: the configured CIDRs, and the VPC (the load balancer's own
    addresses, its health checks, and every internal client when none are configured)."""
    cidrs = [str(cidr) for cidr in settings.serving.endpoint.source_cidrs]
    vpc = str(settings.network.vpc_cidr)
    return cidrs if vpc in cidrs else [vpc, *cidrs]
