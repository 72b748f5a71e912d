"""All serving manifests in apply order, from the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app_config import Settings
from serving_manifests.names import EndpointBinding
from serving_manifests.namespace_objects import (
    render_namespace,
    render_network_policies,
    render_secret_provider_class,
    render_service_accounts,
    render_target_group_binding,
)
from serving_manifests.rayservice import render_rayservice
from serving_manifests.serve_config import render_serve_config


@dataclass(frozen=True)
class ServingManifests:
    """Grouped by what each needs in place before it applies."""

    namespace: dict[str, Any]
    service_accounts: list[dict[str, Any]]
    network_policies: list[dict[str, Any]]
    secret_provider_class: dict[str, Any] | None  # needs the Secrets Store CSI driver's CRDs
    serve_config: dict[str, Any]
    rayservice: dict[str, Any]  # needs KubeRay's CRDs
    target_group_binding: dict[str, Any] | None  # needs the load balancer and its controller

    def all(self) -> list[dict[str, Any]]:
        optional = [self.secret_provider_class] if self.secret_provider_class else []
        binding = [self.target_group_binding] if self.target_group_binding else []
        return [
            self.namespace,
            *self.service_accounts,
            *self.network_policies,
            *optional,
            self.rayservice,
            *binding,
        ]


def render(
    settings: Settings,
    worker_role_arn: str | None,
    endpoint: EndpointBinding | None = None,
) -> ServingManifests:
    serve_config = render_serve_config(settings)
    return ServingManifests(
        namespace=render_namespace(settings),
        service_accounts=render_service_accounts(settings, worker_role_arn),
        network_policies=render_network_policies(settings),
        secret_provider_class=render_secret_provider_class(settings),
        serve_config=serve_config,
        rayservice=render_rayservice(settings, serve_config),
        target_group_binding=render_target_group_binding(settings, endpoint),
    )
