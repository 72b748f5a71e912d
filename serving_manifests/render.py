"""All serving manifests in apply order, from the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app_config import Settings
from serving_manifests.names import EndpointBinding, GcsStoreBinding
from serving_manifests.namespace_objects import (
    render_endpoint_service,
    render_gcs_store_provider_class,
    render_model_cache,
    render_namespace,
    render_network_policies,
    render_pod_disruption_budgets,
    render_secret_provider_class,
    render_service_accounts,
    render_target_group_binding,
)
from serving_manifests.operator_access import render_operator_rbac
from serving_manifests.rayservice import render_rayservice
from serving_manifests.serve_config import render_serve_config
from serving_manifests.serve_extensions import render_serve_extensions


@dataclass(frozen=True)
class ServingManifests:
    """Grouped by what each needs in place before it applies."""

    namespace: dict[str, Any]
    service_accounts: list[dict[str, Any]]
    network_policies: list[dict[str, Any]]
    operator_rbac: list[dict[str, Any]]  # what the operators' Kubernetes group may do
    secret_provider_class: dict[str, Any] | None  # needs the Secrets Store CSI driver's CRDs
    gcs_store_provider_class: dict[str, Any] | None  # likewise
    model_cache: list[dict[str, Any]]  # the PersistentVolume and its claim
    pod_disruption_budgets: list[dict[str, Any]]
    serve_config: dict[str, Any]
    serve_extensions: dict[str, Any]  # the app's Serve code, a ConfigMap the Ray pods mount
    rayservice: dict[str, Any]  # needs KubeRay's CRDs
    endpoint_service: dict[str, Any]
    target_group_binding: dict[str, Any] | None  # needs the load balancer and its controller

    def all(self) -> list[dict[str, Any]]:
        optional = [
            provider_class
            for provider_class in (self.secret_provider_class, self.gcs_store_provider_class)
            if provider_class
        ]
        binding = [self.target_group_binding] if self.target_group_binding else []
        return [
            self.namespace,
            *self.service_accounts,
            *self.network_policies,
            *self.operator_rbac,
            *optional,
            *self.model_cache,
            self.serve_extensions,
            self.rayservice,
            *self.pod_disruption_budgets,
            self.endpoint_service,
            *binding,
        ]


def render(
    settings: Settings,
    worker_role_arn: str | None,
    endpoint: EndpointBinding | None = None,
    gcs_store: GcsStoreBinding | None = None,
    account: str | None = None,
) -> ServingManifests:
    """``endpoint`` and ``gcs_store`` exist once CloudFormation has made them; a configuration
    with GCS fault tolerance cannot render its RayService without the store. ``account`` (or the
    settings') is where an image cache lives."""
    if settings.serving.gcs_fault_tolerance.enabled and gcs_store is None:
        raise ValueError(
            "serving.gcs_fault_tolerance is enabled: the RayService needs the GCS store's "
            "address and token, which exist only in the deployed serving stack"
        )
    serve_config = render_serve_config(settings)
    serve_extensions = render_serve_extensions(settings)
    return ServingManifests(
        namespace=render_namespace(settings),
        service_accounts=render_service_accounts(
            settings, worker_role_arn, gcs_store.head_role_arn if gcs_store else None
        ),
        network_policies=render_network_policies(settings, gcs_store, endpoint),
        operator_rbac=render_operator_rbac(settings),
        secret_provider_class=render_secret_provider_class(settings),
        gcs_store_provider_class=render_gcs_store_provider_class(settings, gcs_store),
        model_cache=render_model_cache(settings),
        pod_disruption_budgets=render_pod_disruption_budgets(settings),
        serve_config=serve_config,
        serve_extensions=serve_extensions,
        rayservice=render_rayservice(settings, serve_config, serve_extensions, gcs_store, account),
        endpoint_service=render_endpoint_service(settings),
        target_group_binding=render_target_group_binding(settings, endpoint),
    )
