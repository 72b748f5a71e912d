"""The IAM role of the Ray pods: read the model and nothing else."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from app_config.serving import Model
from catalog.regions import partition
from constructs import Construct
from constructs.common.irsa import ServiceAccountRole
from constructs.common.nag_acknowledgments import acknowledge


class ModelAccessRole(Construct):
    """IRSA role for ``namespace:service_account``: read-only on the model's S3 prefix, or read of
    the Hugging Face token secret. Publishes ``role``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        namespace: str,
        service_account: str,
        model: Model,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = ServiceAccountRole(
            self,
            "ServiceAccountRole",
            cluster=cluster,
            namespace=namespace,
            service_account=service_account,
            description=f"Ray pods in {namespace}: read {model.s3_uri or 'the Hugging Face token'}",
        ).role
        if model.s3_uri:
            self._read_s3_prefix(model)
        if model.hf_token_secret_arn:
            self.role.add_to_policy(
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                    resources=[model.hf_token_secret_arn],
                )
            )

    def _read_s3_prefix(self, model: Model) -> None:
        # A literal partition, so the ARN (and the acknowledgment below) is plain text.
        bucket_arn = f"arn:{partition(Stack.of(self).region)}:s3:::{model.s3_bucket}"
        prefix = model.s3_prefix
        objects = f"{bucket_arn}/{prefix}/*" if prefix else f"{bucket_arn}/*"
        self.role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]))
        listing = iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket_arn])
        if prefix:
            listing.add_condition("StringLike", {"s3:prefix": [prefix, f"{prefix}/*"]})
        self.role.add_to_policy(listing)
        acknowledge(
            self.role,
            f"AwsSolutions-IAM5[Resource::{objects}]",
            "Read-only s3:GetObject on the objects under the configured model prefix, which is "
            "exactly the model's files; trusted only by the Ray pods' service account.",
        )
