"""All serving manifests in apply order, from the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app_config import Settings
from serving_manifests.namespace_objects import (
    render_endpoint_service,
    render_namespace,
    render_network_policies,
    render_secret_provider_class,
    render_service_account,
)
from serving_manifests.rayservice import render_rayservice
from serving_manifests.serve_config import render_serve_config


@dataclass(frozen=True)
class ServingManifests:
    """Grouped by what each needs in place before it applies."""

    namespace: dict[str, Any]
    service_account: dict[str, Any]
    network_policies: list[dict[str, Any]]
    secret_provider_class: dict[str, Any] | None  # needs the Secrets Store CSI driver's CRDs
    serve_config: dict[str, Any]
    rayservice: dict[str, Any]  # needs KubeRay's CRDs
    endpoint_service: dict[str, Any]  # needs the AWS Load Balancer Controller

    def all(self) -> list[dict[str, Any]]:
        optional = [self.secret_provider_class] if self.secret_provider_class else []
        return [
            self.namespace,
            self.service_account,
            *self.network_policies,
            *optional,
            self.rayservice,
            self.endpoint_service,
        ]


def render(settings: Settings, service_account_role_arn: str | None) -> ServingManifests:
    serve_config = render_serve_config(settings)
    return ServingManifests(
        namespace=render_namespace(settings),
        service_account=render_service_account(settings, service_account_role_arn),
        network_policies=render_network_policies(settings),
        secret_provider_class=render_secret_provider_class(settings),
        serve_config=serve_config,
        rayservice=render_rayservice(settings, serve_config),
        endpoint_service=render_endpoint_service(settings),
    )
