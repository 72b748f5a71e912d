"""The serving stack: Kubernetes resources on the cluster; changes with model and image."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

from app_config import Settings
from app_config.model import NodePlacement
from constructs import Construct
from constructs.common.session_tunnel import TunnelDestination, TunnelDocument, TunnelPolicy
from constructs.serving.device_plugins import DevicePlugins
from constructs.serving.gcs_store import GcsStore, GcsStoreProps
from constructs.serving.pd_ray_service import PdRayService, PdRayServiceProps
from constructs.serving.serving_endpoint import ServingEndpoint
from constructs.serving.serving_operators import ServingOperators
from serving_manifests.names import DASHBOARD_PORT
from stacks.common import removal_policy
from stacks.tunnel import (
    ENDPOINT_LOCAL_PORT,
    endpoint_tunnel,
    endpoint_tunnel_document,
    port_forward_command,
)


class ServingStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        gpu_placements: list[NodePlacement],
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        gcs = settings.serving.gcs_fault_tolerance
        existing = settings.cluster.existing

        def installs(addon: str) -> bool:
            return existing is None or existing.addons.installs(addon)

        self.device_plugins = DevicePlugins(
            self,
            "DevicePlugins",
            cluster=cluster,
            gpu_placements=gpu_placements,
            install_efa=installs("efa_device_plugin"),
            install_nvidia=installs("nvidia_device_plugin"),
        )
        self.operators = ServingOperators(
            self,
            "Operators",
            cluster=cluster,
            gpu_placements=gpu_placements,
            serving_namespace=settings.serving.namespace,
            with_secrets_store=settings.serving.model.hf_token_secret_arn is not None
            or gcs.enabled,
            sync_secrets=gcs.enabled,
            install_kuberay=installs("kuberay"),
            install_load_balancer_controller=installs("load_balancer_controller"),
        )
        self.endpoint = ServingEndpoint(
            self,
            "Endpoint",
            settings=settings,
            vpc=cluster.vpc,
            removal_policy=removal_policy(settings),
        )
        self.operators.bind_only(
            self.endpoint.target_group.target_group_arn,
            self.endpoint.security_group.security_group_id,
        )
        self.gcs_store = (
            GcsStore(
                self,
                "GcsStore",
                GcsStoreProps(
                    settings=gcs,
                    name=settings.serving.name,
                    vpc=cluster.vpc,
                    subnets=cluster.vpc.select_subnets(
                        subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS
                    ).subnets,
                    client_security_group_id=cluster.cluster_security_group_id,
                    removal_policy=removal_policy(settings),
                ),
            )
            if gcs.enabled
            else None
        )
        self.ray_service = PdRayService(
            self,
            "PdRayService",
            PdRayServiceProps(
                settings=settings,
                cluster=cluster,
                operators=self.operators,
                endpoint=self.endpoint.binding,
                gcs_store=self.gcs_store,
            ),
        )
        self._outputs(settings)

    def _outputs(self, settings: Settings) -> None:
        serving = settings.serving
        url = self.endpoint.url
        CfnOutput(self, "EndpointUrl", value=url, description="OpenAI-compatible API (/v1/...)")
        # The model API from a laptop, where a tunnel is the way: README, "Reaching what you
        # deployed".
        tunnel = endpoint_tunnel(settings, self.endpoint)
        if tunnel:
            document = TunnelDocument(
                self,
                "EndpointTunnel",
                name=endpoint_tunnel_document(settings),
                to=TunnelDestination(
                    host=tunnel.host,
                    port=tunnel.port,
                    description=f"Forwards a local port to the model API of {settings.prefix}",
                ),
            )
            policy = TunnelPolicy(
                self,
                "EndpointTunnelPolicy",
                cluster_name=settings.cluster_name,
                documents=[document],
                description=f"Opens the Session Manager tunnel to the model API of "
                f"{settings.prefix}, and nothing else on the cluster's nodes",
            )
            CfnOutput(
                self,
                "EndpointTunnelCommand",
                value=port_forward_command(
                    settings.cluster_name, settings.region, document.name, ENDPOINT_LOCAL_PORT
                ),
                description=tunnel.description,
            )
            CfnOutput(
                self,
                "EndpointTunnelPolicyArn",
                value=policy.policy.managed_policy_arn,
                description="Attach to whoever opens the model API tunnel: ssm:StartSession "
                "with this stack's fixed-destination document only (no shell, no other host)",
            )
        # With iam, curl signs the request itself (--aws-sigv4, curl 7.75+) with the caller's
        # keys; any SigV4 client works (pdctl verify signs with the AWS credential chain).
        signing = (
            f'--aws-sigv4 "aws:amz:{self.region}:execute-api" '
            '--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" '
            '-H "x-amz-security-token: $AWS_SESSION_TOKEN" '
            if self.endpoint.api
            else ""
        )
        CfnOutput(
            self,
            "ChatCompletionsExample",
            value=f"curl {signing}{url}/v1/chat/completions -H 'Content-Type: application/json' "
            f'-d \'{{"model": "{serving.model.id}", "messages": [{{"role": "user", '
            f'"content": "Hello"}}]}}\'',
        )
        if self.endpoint.api:
            CfnOutput(
                self,
                "ModelApiInvokeArn",
                value=self.endpoint.api.invoke_arn_pattern,
                description="Grant callers execute-api:Invoke on this ARN in their IAM policy",
            )
        if self.ray_service.model_access_role:
            CfnOutput(
                self,
                "ModelAccessRoleArn",
                value=self.ray_service.model_access_role.role_arn,
                description="IRSA role of the Ray workers (make manifests ROLE_ARN=...)",
            )
        CfnOutput(
            self,
            "RayDashboardCommand",
            value=f"kubectl -n {serving.namespace} port-forward service/{serving.name}-head-svc "
            f"{DASHBOARD_PORT}:{DASHBOARD_PORT}  # then open http://localhost:{DASHBOARD_PORT}",
            description="The dashboard asks for the Ray cluster's token: kubectl -n "
            f"{serving.namespace} get secret <Ray cluster name> -o jsonpath="
            "'{.data.auth_token}' | base64 -d",
        )
