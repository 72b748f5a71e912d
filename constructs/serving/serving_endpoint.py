"""The OpenAI-compatible endpoint: a Network Load Balancer owned by CloudFormation, behind an
IAM-authenticated API (serving.endpoint.authentication iam, the default) or listening to the
clients it names itself (none).

CloudFormation owns the load balancer, its security group and listener, so the endpoint's DNS
name is a stack output the moment the stack is deployed, and cdk-nag, cfn-lint and checkov see
it. Kubernetes only binds its target group to a Service of ours that spans every Ray cluster's
ready Serve proxies (manifests/endpoint-service.yaml; docs/operating.md, "Upgrades without an
outage").
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3

from app_config import Settings, endpoint_health
from app_config.drain import deregistration_delay_seconds
from constructs import Construct
from constructs.common.checkov_skips import skip_checks
from constructs.common.nag_acknowledgments import acknowledge
from constructs.network.gpu_vpc import endpoint_subnets
from constructs.serving.signed_model_api import SignedModelApi, SignedModelApiProps
from serving_manifests.names import SERVE_PORT, EndpointBinding


class ServingEndpoint(Construct):
    """Publishes ``url``, ``binding`` (what the TargetGroupBinding needs) and ``api`` (the
    SignedModelApi, or None with authentication none)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        vpc: ec2.IVpc,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        endpoint = settings.serving.endpoint
        signed = endpoint.authentication == "iam"
        internet_facing = endpoint.load_balancer_internet_facing
        subnets = endpoint_subnets(vpc, internet_facing)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"Clients of the {settings.serving.name} endpoint",
            allow_all_outbound=False,
        )
        if not signed:  # only the clients named; the plain listener is an explicit choice
            peers = [ec2.Peer.security_group_id(g) for g in endpoint.client_security_group_ids]
            peers += [ec2.Peer.ipv4(str(cidr)) for cidr in endpoint.source_cidrs]
            for peer in peers:
                self.security_group.add_ingress_rule(
                    peer, ec2.Port.tcp(endpoint.port), "Clients of the endpoint"
                )
        for cidr in settings.network.cidr_blocks():
            self.security_group.add_egress_rule(
                ec2.Peer.ipv4(cidr), ec2.Port.tcp(SERVE_PORT), "Ray Serve proxies (pod IPs)"
            )
        self.load_balancer = elbv2.NetworkLoadBalancer(
            self,
            "LoadBalancer",
            vpc=vpc,
            internet_facing=internet_facing,
            vpc_subnets=ec2.SubnetSelection(subnets=subnets),
            security_groups=[self.security_group],
            cross_zone_enabled=True,
            # With iam, the group admits no client: only the API's VPC link (PrivateLink, which
            # these rules would otherwise judge by the link's addresses) reaches the listener.
            enforce_security_group_inbound_rules_on_private_link_traffic=not signed,
        )
        self.target_group = elbv2.NetworkTargetGroup(
            self,
            "ServeProxies",
            vpc=vpc,
            port=SERVE_PORT,
            protocol=elbv2.Protocol.TCP,
            target_type=elbv2.TargetType.IP,
            # A leaving pod's streams keep their connections while its preStop drains them.
            deregistration_delay=Duration.seconds(
                deregistration_delay_seconds(settings.serving.drain_timeout_seconds)
            ),
            preserve_client_ip=False,  # pods see the NLB's addresses (network policy: the VPC)
            # Registration follows pod readiness; the check proves the proxy answers, fast
            # enough that a new Ray cluster's targets take traffic within seconds of joining.
            health_check=elbv2.HealthCheck(
                protocol=elbv2.Protocol.HTTP,
                path=endpoint_health.PROXY_HEALTH_PATH,
                port=str(SERVE_PORT),
                interval=Duration.seconds(endpoint_health.INTERVAL_SECONDS),
                timeout=Duration.seconds(endpoint_health.TIMEOUT_SECONDS),
                healthy_threshold_count=endpoint_health.HEALTHY_THRESHOLD,
                unhealthy_threshold_count=endpoint_health.UNHEALTHY_THRESHOLD,
            ),
        )
        if endpoint.certificate_arn:
            self.load_balancer.add_listener(
                "Tls",
                port=endpoint.port,
                protocol=elbv2.Protocol.TLS,
                certificates=[elbv2.ListenerCertificate.from_arn(endpoint.certificate_arn)],
                ssl_policy=elbv2.SslPolicy.RECOMMENDED_TLS,
                default_target_groups=[self.target_group],
            )
        else:
            self.load_balancer.add_listener(
                "Tcp",
                port=endpoint.port,
                protocol=elbv2.Protocol.TCP,
                default_target_groups=[self.target_group],
            )
        if endpoint.allow_from_anywhere:
            acknowledge(
                self.security_group,
                "AwsSolutions-EC23",
                "serving.endpoint.allow_from_anywhere is set: the operator chose to open the "
                "TLS endpoint to every address.",
            )
        if endpoint.certificate_arn:
            self._log_tls_connections(settings)
        else:
            no_access_logs = (
                "A TCP listener: NLB access logs exist for TLS listeners only (ELB user guide, "
                "'Access logs for your Network Load Balancer'); VPC flow logs record every "
                "connection and Ray Serve logs every request on the pods."
            )
            acknowledge(self.load_balancer, "AwsSolutions-ELB2", no_access_logs)
            skip_checks(self.load_balancer.node.default_child, {"CKV_AWS_91": no_access_logs})
        scheme = "https" if endpoint.certificate_arn else "http"
        self.url = f"{scheme}://{self.load_balancer.load_balancer_dns_name}:{endpoint.port}"
        self.api = None
        if signed:
            self.api = SignedModelApi(
                self,
                "SignedApi",
                SignedModelApiProps(
                    settings=settings,
                    vpc=vpc,
                    load_balancer=self.load_balancer,
                    load_balancer_port=endpoint.port,
                    removal_policy=removal_policy,
                ),
            )
            self.url = self.api.url
        self.binding = EndpointBinding(
            target_group_arn=self.target_group.target_group_arn,
            load_balancer_security_group_id=self.security_group.security_group_id,
            # Literal CIDRs: the VPC construct computes its subnets' ranges at synth time.
            load_balancer_cidrs=tuple(subnet.ipv4_cidr_block for subnet in subnets),
        )

    def _log_tls_connections(self, settings: Settings) -> None:
        """A TLS listener's connections (client address, TLS version, cipher, bytes) go to a
        bucket of their own: SSE-S3 (what NLB access logs write with), no public access, TLS
        only, expiring with the log retention. Kept on destroy like the other logs."""
        keep = settings.retain_data_on_destroy
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=Duration.days(settings.observability.log_retention_days),
                    noncurrent_version_expiration=Duration.days(1),
                )
            ],
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
            if keep
            else RemovalPolicy.DESTROY,
            auto_delete_objects=not keep,
        )
        self.load_balancer.log_access_logs(self.access_logs, prefix="nlb")
        own_access = (
            "This bucket holds the load balancer's access logs; logging its own access would "
            "need a second bucket for the same records, and CloudTrail data events cover it."
        )
        acknowledge(self.access_logs, "AwsSolutions-S1", own_access)
        skip_checks(self.access_logs.node.default_child, {"CKV_AWS_18": own_access})
