"""The IAM role every node of this cluster runs as."""

from __future__ import annotations

from aws_cdk import aws_iam as iam

from constructs import Construct
from constructs.common.nag_acknowledgments import acknowledge, aws_managed_policy_finding

# What the kubelet and the node need, nothing more. The VPC CNI's ENI permissions
# (AmazonEKS_CNI_Policy) are not here: the aws-node service account gets them through IRSA,
# so pods on the node cannot borrow them (EKS best practices guide, "Identity and access").
NODE_MANAGED_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",  # Session Manager instead of SSH keys
)


class NodeRole(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, description: str) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            description=description,
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(name)
                for name in NODE_MANAGED_POLICIES
            ],
        )
        for name in NODE_MANAGED_POLICIES:
            acknowledge(
                self.role,
                aws_managed_policy_finding(name),
                f"{name} is the AWS-maintained policy the EKS user guide prescribes for node roles "
                "('Amazon EKS node IAM role'); AWS updates it as the kubelet's needs change, "
                "and no pod without host networking can use it (IMDS hop limit 1 on every "
                "launch template; the serving namespace's baseline Pod Security forbids host "
                "networking, kube-system's node agents have it by design).",
            )
