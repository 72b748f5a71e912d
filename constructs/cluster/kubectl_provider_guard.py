"""The guard for aws-cdk-lib's kubectl provider, whose handler is cluster-admin.

The handler's role holds an EKS access entry with AmazonEKSClusterAdminPolicy (aws-cdk-lib
aws-eks-v2 gives it one so that CloudFormation can apply manifests and charts): whoever can
invoke the handler, or the provider framework's function that invokes it, can apply any manifest
to the cluster; whoever can change their code or pass the handler's role to a function of their
own can do the same. IAM in the account decides who that is (lambda:InvokeFunction and friends
on these functions, iam:PassRole on the role), and a Lambda function's resource policy can only
allow, never deny. So the guard is a service control policy the organization attaches to the
account: it denies those actions to every principal but the one that needs each (CloudFormation
invokes the framework function with the stack's execution role; the framework function's role
invokes the handler). The stack prints it, with this deployment's ARNs filled in, as an output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, DefaultStackSynthesizer, Fn, Stack
from aws_cdk import aws_eks_v2 as eks

from constructs import Construct
from constructs.common.checkov_skips import resources_of_type

# What would let a principal act as the handler: run it, run the framework that runs it, change
# either's code or permissions, or hand the handler's role to a function of its own.
INVOKE = ("lambda:InvokeFunction", "lambda:InvokeFunctionUrl")
CHANGE_FUNCTION = (
    "lambda:UpdateFunctionCode",
    "lambda:UpdateFunctionConfiguration",
    "lambda:AddPermission",
    "lambda:CreateFunctionUrlConfig",
    "lambda:UpdateFunctionUrlConfig",
    "lambda:CreateAlias",
    "lambda:UpdateAlias",
    "lambda:PublishVersion",
)
CHANGE_ROLE = (
    "iam:PassRole",
    "iam:UpdateAssumeRolePolicy",
    "iam:AttachRolePolicy",
    "iam:PutRolePolicy",
)


@dataclass(frozen=True)
class KubectlProviderArns:
    framework_function: str
    framework_role: str
    handler_function: str
    handler_role: str
    deployer_role: str  # the CloudFormation execution role of the stack


def guard_policy(arns: KubectlProviderArns) -> dict[str, Any]:
    """The service control policy: each function callable and changeable only by its caller."""

    def versions(function: str) -> list[str]:
        return [function, f"{function}:*"]

    def deny(sid: str, actions: tuple[str, ...], resources: list[str], allowed: str) -> dict:
        return {
            "Sid": sid,
            "Effect": "Deny",
            "Action": list(actions),
            "Resource": resources,
            "Condition": {"ArnNotEquals": {"aws:PrincipalArn": allowed}},
        }

    return {
        "Version": "2012-10-17",
        "Statement": [
            deny(
                "OnlyCloudFormationRunsTheKubectlProvider",
                INVOKE,
                versions(arns.framework_function),
                arns.deployer_role,
            ),
            deny(
                "OnlyTheProviderFrameworkRunsTheClusterAdminHandler",
                INVOKE,
                versions(arns.handler_function),
                arns.framework_role,
            ),
            deny(
                "OnlyCloudFormationChangesTheKubectlProvider",
                CHANGE_FUNCTION,
                versions(arns.framework_function) + versions(arns.handler_function),
                arns.deployer_role,
            ),
            deny(
                "OnlyCloudFormationUsesTheClusterAdminRole",
                CHANGE_ROLE,
                [arns.handler_role, arns.framework_role],
                arns.deployer_role,
            ),
        ],
    }


def provider_arns(cluster: eks.Cluster) -> KubectlProviderArns:
    provider = cluster.kubectl_provider
    functions = {f.node.path: f for f in resources_of_type(provider, "AWS::Lambda::Function")}
    roles = {r.node.path: r for r in resources_of_type(provider, "AWS::IAM::Role")}

    def one(found: dict[str, Any], framework: bool) -> Any:
        (match,) = [r for path, r in found.items() if ("framework" in path) == framework]
        return match

    stack = Stack.of(cluster)
    synthesizer = stack.synthesizer
    deployer = (
        Fn.sub(synthesizer.cloud_formation_execution_role_arn)
        if isinstance(synthesizer, DefaultStackSynthesizer)
        else "<the role CloudFormation deploys this stack with>"
    )
    return KubectlProviderArns(
        framework_function=one(functions, True).attr_arn,
        framework_role=one(roles, True).attr_arn,
        handler_function=one(functions, False).attr_arn,
        handler_role=one(roles, False).attr_arn,
        deployer_role=deployer,
    )


class KubectlProviderGuard(Construct):
    """Publishes ``policy`` (the SCP as a document with tokens) and the output that prints it."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.Cluster) -> None:
        super().__init__(scope, construct_id)
        self.arns = provider_arns(cluster)
        self.policy = guard_policy(self.arns)
        CfnOutput(
            self,
            "KubectlProviderGuardScp",
            value=Stack.of(self).to_json_string(self.policy),
            description="Service control policy: only CloudFormation may run or change the "
            "cluster-admin kubectl provider (docs/security.md, 'The deploy path')",
        )
