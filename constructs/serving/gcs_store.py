"""ElastiCache for Valkey holding Ray's GCS state, so that a restarted Ray head resumes the
running cluster: TLS in transit, an AUTH token from Secrets Manager, a customer managed key at
rest, private subnets, a primary with replicas in other zones and automatic failover.

A replication group with cluster mode disabled, not ElastiCache Serverless: Ray's GCS client
supports a single shard only ("Ray currently doesn't support Redis Cluster with more than one
shard"), and KubeRay documents standalone Redis; Serverless is always cluster-mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager

from app_config.serving import GcsFaultTolerance
from constructs import Construct
from constructs.common.nag_acknowledgments import acknowledge
from constructs.common.rotating_key import rotating_key

PORT = 6379
# ElastiCache AUTH tokens: 16-128 printable characters, of the punctuation only !&#$^<>-.
AUTH_TOKEN_LENGTH = 64


@dataclass(frozen=True)
class GcsStoreProps:
    settings: GcsFaultTolerance
    name: str
    vpc: ec2.IVpc
    subnets: list[ec2.ISubnet]  # private, in at least two zones
    client_security_group_id: str  # the cluster security group, which the Ray head runs in
    removal_policy: RemovalPolicy


class GcsStore(Construct):
    """Publishes ``host`` and ``port`` of the primary endpoint, ``auth_token`` (the secret) and
    ``grant_read_token`` (for the Ray head's role)."""

    def __init__(self, scope: Construct, construct_id: str, props: GcsStoreProps) -> None:
        super().__init__(scope, construct_id)
        settings = props.settings
        self.key = rotating_key(
            self,
            "Key",
            description="Encrypts the Ray GCS store and its AUTH token",
            removal_policy=props.removal_policy,
        )
        self.auth_token = secretsmanager.Secret(
            self,
            "AuthToken",
            description="AUTH token of the Ray GCS store (ElastiCache for Valkey)",
            encryption_key=self.key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=AUTH_TOKEN_LENGTH, exclude_punctuation=True
            ),
            removal_policy=RemovalPolicy.DESTROY,  # a new store gets a new token
        )
        acknowledge(
            self.auth_token,
            "AwsSolutions-SMG4",
            "ElastiCache AUTH tokens rotate through ModifyReplicationGroup with the ROTATE "
            "strategy, which no Secrets Manager rotation template performs; the token is read "
            "only by the Ray head's IRSA role and never leaves the VPC in clear text (TLS).",
        )
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=props.vpc,
            description="Ray GCS store: Valkey over TLS from the cluster security group only",
            allow_all_outbound=False,
        )
        self.security_group.add_ingress_rule(
            ec2.Peer.security_group_id(props.client_security_group_id),
            ec2.Port.tcp(PORT),
            "Ray head (cluster security group) to Valkey",
        )
        subnet_group = elasticache.CfnSubnetGroup(
            self,
            "SubnetGroup",
            description="Private subnets of the Ray GCS store",
            subnet_ids=[subnet.subnet_id for subnet in props.subnets],
        )
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_description=f"Ray GCS state of {props.name}",
            engine="valkey",
            engine_version=settings.engine_version,
            cache_node_type=settings.node_type,
            data_tiering_enabled=True if settings.data_tiering else None,
            num_cache_clusters=1 + settings.replicas,
            multi_az_enabled=True,
            automatic_failover_enabled=True,
            cache_subnet_group_name=subnet_group.ref,
            security_group_ids=[self.security_group.security_group_id],
            port=PORT,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            at_rest_encryption_enabled=True,
            kms_key_id=self.key.key_arn,
            auth_token=self.auth_token.secret_value.unsafe_unwrap(),  # a dynamic reference
            auto_minor_version_upgrade=True,
        )
        # Kept data means a final snapshot here: the store's state outlives `cdk destroy` without
        # a replication group that keeps billing.
        self.replication_group.apply_removal_policy(
            RemovalPolicy.DESTROY
            if props.removal_policy == RemovalPolicy.DESTROY
            else RemovalPolicy.SNAPSHOT
        )
        self.host = self.replication_group.attr_primary_end_point_address
        self.port = PORT  # set above; a number here, where the attribute would be a string

    def grant_read_token(self, role: iam.IRole) -> None:
        self.auth_token.grant_read(role)
