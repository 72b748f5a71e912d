"""The IAM role every node of this cluster runs as."""

from __future__ import annotations

from aws_cdk import aws_iam as iam

from constructs import Construct
from constructs.common.checkov_skips import resources_of_type, skip_checks
from constructs.common.nag_acknowledgments import acknowledge, aws_managed_policy_finding

# What the kubelet and the node need, nothing more. The VPC CNI's ENI permissions
# (AmazonEKS_CNI_Policy) are not here: the aws-node service account gets them through IRSA,
# so pods on the node cannot borrow them (EKS best practices guide, "Identity and access").
NODE_MANAGED_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryPullOnly",
)

# Session Manager and nothing else of Systems Manager: the agent registers the node
# (ssm:UpdateInstanceInformation) and opens its control and data channels (ssmmessages), the
# policy the Systems Manager user guide gives for "an instance profile with minimal Session
# Manager permissions" ("Create a custom IAM role for Session Manager"; its S3 and KMS
# statements apply only to session logging and encryption preferences, which this app does not
# set). AmazonSSMManagedInstanceCore, which this replaces, also let every node read every
# Parameter Store parameter of the account (ssm:GetParameter*), fetch documents and run
# Run Command (ec2messages): none of which a port-forwarding tunnel uses. No action here takes
# a resource narrower than "*" that the agent could name before it is registered (the
# ssmmessages actions have no resource types; Service Authorization Reference, "Amazon
# Message Gateway Service").
SESSION_MANAGER_AGENT_ACTIONS = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
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
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(SESSION_MANAGER_AGENT_ACTIONS), resources=["*"])
        )
        for policy in resources_of_type(self.role, "AWS::IAM::Policy"):
            skip_checks(
                policy,
                {
                    "CKV_AWS_111": "The Session Manager agent's writes (registering the node, "
                    "opening its own channels) take '*': the ssmmessages actions have no resource "
                    "types, and these five are the Systems Manager user guide's minimal Session "
                    "Manager instance policy; every other statement names its resources."
                },
            )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5[Resource::*]",
            "The Session Manager agent's actions (ssm:UpdateInstanceInformation and the four "
            "ssmmessages channel actions, exactly the Systems Manager user guide's minimal "
            "Session Manager instance policy) take '*': the ssmmessages actions have no "
            "resource types, and the node registers itself before it has a managed-instance "
            "ARN. Nothing else of Systems Manager (no Run Command, documents or parameters).",
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
