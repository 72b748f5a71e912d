"""IAM roles for service accounts, each trusted by exactly one namespace/service-account pair."""

from __future__ import annotations

from aws_cdk import CfnJson
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from constructs import Construct


class ServiceAccountRole(Construct):
    """An IAM role that only pods running as ``namespace:service_account`` can assume.

    Both the ``sub`` and ``aud`` claims are pinned: a role trusted on ``aud`` alone could be
    assumed by every service account in the cluster. The condition keys contain the issuer, a
    token, so they go through CfnJson (a JSON object key cannot be an unresolved token).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        namespace: str,
        service_account: str,
        description: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.namespace = namespace
        self.service_account = service_account
        provider = cluster.open_id_connect_provider
        issuer = provider.open_id_connect_provider_issuer
        claims = CfnJson(
            self,
            "TrustedClaims",
            value={
                f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                f"{issuer}:aud": "sts.amazonaws.com",
            },
        )
        self.role = iam.Role(
            self,
            "Role",
            description=description,
            assumed_by=iam.FederatedPrincipal(
                provider.open_id_connect_provider_arn,
                conditions={"StringEquals": claims},
                assume_role_action="sts:AssumeRoleWithWebIdentity",
            ),
        )
