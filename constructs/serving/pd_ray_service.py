"""The prefill/decode Ray service on the cluster, as Kubernetes resources owned by the stack."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks

from app_config import Settings
from constructs import Construct
from constructs.common.irsa import ServiceAccountRole
from constructs.serving.gcs_store import GcsStore
from constructs.serving.model_access_role import ModelAccessRole
from constructs.serving.serving_operators import ServingOperators
from serving_manifests import ServingManifests, render
from serving_manifests.names import (
    HEAD_SERVICE_ACCOUNT,
    WORKER_SERVICE_ACCOUNT,
    EndpointBinding,
    GcsStoreBinding,
)


@dataclass(frozen=True)
class PdRayServiceProps:
    settings: Settings
    cluster: eks.ICluster
    operators: ServingOperators
    endpoint: EndpointBinding
    gcs_store: GcsStore | None  # with serving.gcs_fault_tolerance


class PdRayService(Construct):
    """Publishes ``manifests`` (what was applied) and ``model_access_role`` (None for a public
    Hugging Face model)."""

    def __init__(self, scope: Construct, construct_id: str, props: PdRayServiceProps) -> None:
        super().__init__(scope, construct_id)
        settings, cluster, operators = props.settings, props.cluster, props.operators
        model = settings.serving.model
        self.model_access_role = None
        if model.s3_uri or model.hf_token_secret_arn:
            self.model_access_role = ModelAccessRole(
                self,
                "ModelAccess",
                cluster=cluster,
                namespace=settings.serving.namespace,
                service_account=WORKER_SERVICE_ACCOUNT,
                model=model,
            ).role
        role_arn = self.model_access_role.role_arn if self.model_access_role else None
        self.manifests: ServingManifests = render(
            settings,
            role_arn,
            props.endpoint,
            self._gcs_store_binding(props),
            account=Stack.of(self).account,
        )
        m = self.manifests

        namespace = self._apply("Namespace", cluster, [m.namespace])
        # KubeRay is installed for this namespace only: its Role and RoleBinding go into it, so
        # the namespace comes first. Deleted in reverse: the RayService (which depends on the
        # operator) goes before the operator, whose finalizers on the Ray clusters must still
        # run; the namespace goes last but before the GCS store (the cleanup Job reads it).
        if operators.kuberay is not None:
            operators.kuberay.node.add_dependency(namespace)
        if props.gcs_store:
            namespace.node.add_dependency(props.gcs_store)
        identity = self._apply("Identity", cluster, [*m.service_accounts, *m.network_policies])
        identity.node.add_dependency(namespace)
        operator_access = self._apply("OperatorAccess", cluster, m.operator_rbac)
        operator_access.node.add_dependency(namespace)
        model_cache = self._apply("ModelCache", cluster, m.model_cache)
        model_cache.node.add_dependency(namespace)
        # Not pruned: a new version of the package is a ConfigMap of a new name, and the old
        # Ray cluster, which serves until the new one is ready, keeps mounting the old one (a
        # pod of it restarted meanwhile would not start without it). Old versions go with the
        # namespace, or by hand (docs/operating.md, "The app's Serve code").
        extensions = eks.KubernetesManifest(
            self, "ServeExtensions", cluster=cluster, manifest=[m.serve_extensions], prune=False
        )
        extensions.node.add_dependency(namespace)
        ray_service = self._apply("RayService", cluster, [m.rayservice])
        ray_service.node.add_dependency(identity, model_cache, extensions)
        if operators.kuberay is not None:
            ray_service.node.add_dependency(operators.kuberay)
        for construct_id, provider_class in (
            ("HfTokenProvider", m.secret_provider_class),
            ("GcsStoreAuthProvider", m.gcs_store_provider_class),
        ):
            if provider_class:
                secret = self._apply(construct_id, cluster, [provider_class])
                secret.node.add_dependency(namespace, operators.secrets_store)
                ray_service.node.add_dependency(secret)
        if m.pod_disruption_budgets:  # kubectl fails on an empty manifest
            budgets = self._apply("DisruptionBudgets", cluster, m.pod_disruption_budgets)
            budgets.node.add_dependency(namespace)
        binding = self._apply(
            "EndpointBinding", cluster, [m.endpoint_service, m.target_group_binding]
        )
        binding.node.add_dependency(namespace)
        if operators.load_balancer_controller is not None:
            binding.node.add_dependency(operators.load_balancer_controller)

    def _gcs_store_binding(self, props: PdRayServiceProps) -> GcsStoreBinding | None:
        """The head reads the store's token with its own IRSA role; the workers never see it."""
        if props.gcs_store is None:
            return None
        head_role = ServiceAccountRole(
            self,
            "HeadRole",
            cluster=props.cluster,
            namespace=props.settings.serving.namespace,
            service_account=HEAD_SERVICE_ACCOUNT,
            description="Ray head: reads the GCS store's AUTH token",
        ).role
        props.gcs_store.grant_read_token(head_role)
        return GcsStoreBinding(
            host=props.gcs_store.host,
            port=props.gcs_store.port,
            auth_token_secret_arn=props.gcs_store.auth_token.secret_arn,
            head_role_arn=head_role.role_arn,
        )

    def _apply(
        self, construct_id: str, cluster: eks.ICluster, objects: list[dict]
    ) -> eks.KubernetesManifest:
        return eks.KubernetesManifest(self, construct_id, cluster=cluster, manifest=objects)
