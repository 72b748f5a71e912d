"""The prefill/decode Ray service on the cluster, as Kubernetes resources owned by the stack."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks

from app_config import Settings
from constructs import Construct
from constructs.model_access_role import ModelAccessRole
from constructs.serving_operators import ServingOperators
from serving_manifests import ServingManifests, render
from serving_manifests.names import SERVICE_ACCOUNT, endpoint_service_name

ENDPOINT_HOSTNAME_PATH = ".status.loadBalancer.ingress[0].hostname"


@dataclass(frozen=True)
class PdRayServiceProps:
    settings: Settings
    cluster: eks.ICluster
    operators: ServingOperators


class PdRayService(Construct):
    """Publishes ``manifests`` (what was applied), ``model_access_role`` (None for a public
    Hugging Face model) and ``endpoint_hostname`` (the NLB's DNS name, read from the Service once
    the load balancer controller has provisioned it)."""

    def __init__(self, scope: Construct, construct_id: str, props: PdRayServiceProps) -> None:
        super().__init__(scope, construct_id)
        settings, cluster, operators = props.settings, props.cluster, props.operators
        model = settings.serving.model
        role = None
        if model.s3_uri or model.hf_token_secret_arn:
            role = ModelAccessRole(
                self,
                "ModelAccess",
                cluster=cluster,
                namespace=settings.serving.namespace,
                service_account=SERVICE_ACCOUNT,
                model=model,
            ).role
        self.model_access_role = role
        self.manifests: ServingManifests = render(settings, role.role_arn if role else None)
        m = self.manifests

        namespace = self._apply("Namespace", cluster, [m.namespace])
        identity = self._apply("Identity", cluster, [m.service_account, *m.network_policies])
        identity.node.add_dependency(namespace)
        if m.secret_provider_class:
            secret = self._apply("HfTokenProvider", cluster, [m.secret_provider_class])
            secret.node.add_dependency(namespace, operators.secrets_store)
        ray_service = self._apply("RayService", cluster, [m.rayservice])
        ray_service.node.add_dependency(identity, operators.kuberay)
        if m.secret_provider_class:
            ray_service.node.add_dependency(secret)
        endpoint = self._apply("Endpoint", cluster, [m.endpoint_service])
        endpoint.node.add_dependency(namespace, operators.load_balancer_controller)

        hostname = eks.KubernetesObjectValue(
            self,
            "EndpointHostname",
            cluster=cluster,
            object_type="service",
            object_name=endpoint_service_name(settings),
            object_namespace=settings.serving.namespace,
            json_path=ENDPOINT_HOSTNAME_PATH,
            timeout=Duration.minutes(10),  # NLB provisioning takes a few minutes
        )
        hostname.node.add_dependency(endpoint)
        self.endpoint_hostname = hostname.value

    def _apply(
        self, construct_id: str, cluster: eks.ICluster, objects: list[dict]
    ) -> eks.KubernetesManifest:
        return eks.KubernetesManifest(self, construct_id, cluster=cluster, manifest=objects)
