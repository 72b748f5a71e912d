"""The model API's authenticated front door: an API Gateway REST API with IAM authorization,
HTTPS and response streaming, over a VPC link to the internal Network Load Balancer.

Why this front (docs/security.md, "What the model API admits, and who"): Ray Serve LLM 2.58 has no
authentication of its own (its OpenAI ingress installs CORS, error, metrics and request-id
middleware only; ray-project/ray#59578), and an NLB has no authentication action. A REST API
with AWS_IAM checks a SigV4 signature and execute-api:Invoke on every request, serves HTTPS with
AWS's certificate (so the default needs no certificate of the user's), and streams proxy
responses (responseTransferMode STREAM: up to 15 minutes per response, 5 minutes idle for
regional and private endpoints; API Gateway developer guide, "Stream the integration response").
An ALB with authenticate-oidc would need an identity provider and a certificate from the user.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam

from app_config import Settings
from constructs import Construct
from constructs.common.checkov_skips import skip_checks
from constructs.common.encrypted_log_group import encrypted_log_group
from constructs.common.log_encryption_key import LogEncryptionKey
from constructs.common.nag_acknowledgments import acknowledge

# One JSON line per request: CDK's standard fields, plus who signed it. With AWS_IAM
# authorization, caller and user are access-key/principal ids; userArn is the signer's ARN (the
# assumed-role session for a role) and accountId its account; vpceId the endpoint a private
# API's request came through (API Gateway developer guide, "$context variables for data models,
# authorizers, mapping templates, and access logging").
ACCESS_LOG = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "caller": "$context.identity.caller",
    "user": "$context.identity.user",
    "userArn": "$context.identity.userArn",
    "accountId": "$context.identity.accountId",
    "vpceId": "$context.identity.vpceId",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "resourcePath": "$context.resourcePath",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
}
STAGE = "api"
# A streamed response may last this long (the service's maximum for STREAM); the default drain
# timeout (300 s) and any answer within max_model_len fit well inside it.
STREAM_TIMEOUT = Duration.minutes(15)
HTTPS = 443


@dataclass(frozen=True)
class SignedModelApiProps:
    settings: Settings
    vpc: ec2.IVpc
    load_balancer: elbv2.INetworkLoadBalancer
    load_balancer_port: int
    removal_policy: RemovalPolicy


class SignedModelApi(Construct):
    """Publishes ``api``, ``url`` (the OpenAI base URL is ``url + "/v1"``), ``invoke_arn_pattern``
    (what a caller's IAM policy grants execute-api:Invoke on) and, for a private API,
    ``vpc_endpoint`` with its security group."""

    def __init__(self, scope: Construct, construct_id: str, props: SignedModelApiProps) -> None:
        super().__init__(scope, construct_id)
        settings, endpoint = props.settings, props.settings.serving.endpoint
        private = endpoint.scheme == "internal"
        self.vpc_endpoint = self._private_endpoint(props) if private else None
        log_key = LogEncryptionKey(
            self,
            "AccessLogKey",
            description=f"Encrypts the access log of the {settings.serving.name} model API",
            removal_policy=props.removal_policy,
        ).key
        access_log = encrypted_log_group(
            self,
            "AccessLog",
            key=log_key,
            retention_days=settings.observability.log_retention_days,
            removal_policy=props.removal_policy,
        )
        self.api = apigateway.RestApi(
            self,
            "Api",
            rest_api_name=f"{settings.serving.name}-model-api",
            description=f"OpenAI-compatible API of {settings.serving.name} (SigV4, streaming)",
            endpoint_configuration=apigateway.EndpointConfiguration(
                types=[
                    apigateway.EndpointType.PRIVATE if private else apigateway.EndpointType.REGIONAL
                ],
                vpc_endpoints=[self.vpc_endpoint] if self.vpc_endpoint else None,
            ),
            policy=self._resource_policy(settings),
            cloud_watch_role=False,  # account-wide setting; access logs need none
            deploy_options=apigateway.StageOptions(
                stage_name=STAGE,
                access_log_destination=apigateway.LogGroupLogDestination(access_log),
                access_log_format=apigateway.AccessLogFormat.custom(json.dumps(ACCESS_LOG)),
                tracing_enabled=True,
                metrics_enabled=True,
            ),
            default_method_options=apigateway.MethodOptions(
                authorization_type=apigateway.AuthorizationType.IAM
            ),
            disable_execute_api_endpoint=False,
        )
        link = apigateway.VpcLink(self, "VpcLink", targets=[props.load_balancer])
        proxy = self.api.root.add_resource("{proxy+}")
        host = props.load_balancer.load_balancer_dns_name
        proxy.add_method(
            "ANY",
            apigateway.Integration(
                type=apigateway.IntegrationType.HTTP_PROXY,
                integration_http_method="ANY",
                uri=f"http://{host}:{props.load_balancer_port}/{{proxy}}",
                options=apigateway.IntegrationOptions(
                    connection_type=apigateway.ConnectionType.VPC_LINK,
                    vpc_link=link,
                    timeout=STREAM_TIMEOUT,
                    response_transfer_mode=apigateway.ResponseTransferMode.STREAM,
                    request_parameters={
                        "integration.request.path.proxy": "method.request.path.proxy"
                    },
                ),
            ),
            request_parameters={"method.request.path.proxy": True},
            authorization_type=apigateway.AuthorizationType.IAM,
        )
        stack = Stack.of(self)
        self.invoke_arn_pattern = stack.format_arn(
            service="execute-api",
            resource=self.api.rest_api_id,
            resource_name=f"{STAGE}/*/*",
        )
        if self.vpc_endpoint:
            host_name = (
                f"{self.api.rest_api_id}-{self.vpc_endpoint.vpc_endpoint_id}.execute-api."
                f"{stack.region}.{stack.url_suffix}"
            )
        else:
            host_name = f"{self.api.rest_api_id}.execute-api.{stack.region}.{stack.url_suffix}"
        self.url = f"https://{host_name}/{STAGE}"
        self._acknowledge()

    def _private_endpoint(self, props: SignedModelApiProps) -> ec2.InterfaceVpcEndpoint:
        """The API's own execute-api endpoint, without private DNS: turning that on would send
        every execute-api name the VPC resolves (other teams' public APIs too) to this endpoint.
        Clients use the API's endpoint-specific name instead."""
        endpoint = props.settings.serving.endpoint
        security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=props.vpc,
            description="Clients of the model API execute-api endpoint",
            allow_all_outbound=False,
        )
        peers = [ec2.Peer.security_group_id(group) for group in endpoint.client_security_group_ids]
        peers += [ec2.Peer.ipv4(str(cidr)) for cidr in endpoint.source_cidrs]
        if not peers:  # IAM decides who; the network admits the VPC
            peers = [ec2.Peer.ipv4(cidr) for cidr in props.settings.network.cidr_blocks()]
        for peer in peers:
            security_group.add_ingress_rule(peer, ec2.Port.tcp(HTTPS), "Model API clients")
        return ec2.InterfaceVpcEndpoint(
            self,
            "ExecuteApiEndpoint",
            vpc=props.vpc,
            service=ec2.InterfaceVpcEndpointAwsService.APIGATEWAY,
            private_dns_enabled=False,
            open=False,  # not the VPC range by default: the rules above
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[security_group],
        )

    def _resource_policy(self, settings: Settings) -> iam.PolicyDocument:
        """Allow names the account, which delegates to IAM: a caller also needs
        execute-api:Invoke in its own policies (IAM user guide, "AWS account principals").
        Deny anything that does not come through this API's VPC endpoint (private) or from
        source_cidrs (regional)."""
        invoke = "execute-api:/*"
        statements = [
            iam.PolicyStatement(
                sid="CallersOfThisAccountWithInvokeRights",
                actions=["execute-api:Invoke"],
                principals=[iam.AccountRootPrincipal()],
                resources=[invoke],
            )
        ]
        endpoint = settings.serving.endpoint
        condition = (
            {"StringNotEquals": {"aws:SourceVpce": self.vpc_endpoint.vpc_endpoint_id}}
            if self.vpc_endpoint
            else {"NotIpAddress": {"aws:SourceIp": [str(c) for c in endpoint.source_cidrs]}}
        )
        statements.append(
            iam.PolicyStatement(
                sid="OnlyThroughTheNamedNetworkPath",
                effect=iam.Effect.DENY,
                actions=["execute-api:Invoke"],
                principals=[iam.AnyPrincipal()],
                resources=[invoke],
                conditions=condition,
            )
        )
        return iam.PolicyDocument(statements=statements)

    def _acknowledge(self) -> None:
        acknowledge(
            self.api,
            "AwsSolutions-APIG2",
            "A proxy to the OpenAI-compatible server: Ray Serve validates every request body "
            "against the OpenAI schema; API Gateway request validation cannot run on a "
            "streamed HTTP_PROXY integration's free-form JSON.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-APIG3",
            "Every request must carry a valid SigV4 signature of a principal with "
            "execute-api:Invoke on this API, and the resource policy admits only the named "
            "network path; a WAF web ACL is the user's choice (associate it with the stage).",
        )
        acknowledge(
            self.api,
            "AwsSolutions-COG4",
            "Callers authenticate with AWS_IAM (SigV4 signatures of IAM roles and users with "
            "execute-api:Invoke), the way AWS services and workloads in the account already "
            "prove who they are; a Cognito user pool would add a second identity store.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-APIG6",
            "Execution logging needs the account-wide API Gateway CloudWatch role (an "
            "account-level setting this app does not change); the stage writes JSON access "
            "logs of every request (caller, status, latency) to a KMS-encrypted log group.",
        )
        stage = self.api.deployment_stage.node.default_child
        skip_checks(
            stage,
            {
                "CKV_AWS_120": "Caching does not apply to streamed responses (STREAM transfer "
                "mode supports no endpoint caching) and would mix users' completions.",
                "CKV2_AWS_51": "Callers authenticate with SigV4 (AWS_IAM); client certificates "
                "apply to regional custom domains, not to this private or IAM-signed API.",
                "CKV2_AWS_29": "WAF is the user's choice; every request is IAM-authenticated.",
                "CKV2_AWS_4": "Execution logging needs the account-wide CloudWatch role; access "
                "logging is on.",
            },
        )
