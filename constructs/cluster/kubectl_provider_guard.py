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

Two more doors lead to cluster-admin and are shut the same way: EKS access entries
(eks:CreateAccessEntry and eks:AssociateAccessPolicy with AmazonEKSClusterAdminPolicy, or
eks:UpdateAccessEntry adding a Kubernetes group that is bound to cluster-admin), which only
CloudFormation may call on this cluster; and the execution role itself. With the account's
default bootstrap that role is shared: every CDK app of the account deploys with it, and one of
them can import the framework function's ARN and apply a manifest. With a bootstrap of this
app's own (``bootstrap_qualifier``) the exempt role is this app's alone, and only its deploy role
(which the CDK CLI assumes; the bootstrap template grants it iam:PassRole on the execution role)
may hand it to CloudFormation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, DefaultStackSynthesizer, Fn, Stack, Token
from aws_cdk import aws_eks_v2 as eks

from constructs import Construct
from constructs.common.checkov_skips import resources_of_type

# What would let a principal act as the handler: run it, run the framework that runs it, change
# either's code or permissions, or hand the handler's role to a function of its own.
# lambda:InvokeAsync is the deprecated asynchronous invoke, still an action of its own (Service
# Authorization Reference, AWS Lambda).
INVOKE = ("lambda:InvokeFunction", "lambda:InvokeFunctionUrl", "lambda:InvokeAsync")
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


# What makes a principal cluster-admin without the provider: an access entry of its own with an
# access policy, or an existing entry's Kubernetes groups changed (Amazon EKS API reference;
# Service Authorization Reference, Amazon EKS: CreateAccessEntry on the cluster, the other two on
# the access entry).
ACCESS_ENTRIES = (
    "eks:CreateAccessEntry",
    "eks:AssociateAccessPolicy",
    "eks:UpdateAccessEntry",
)


@dataclass(frozen=True)
class KubectlProviderArns:
    framework_function: str
    framework_role: str
    handler_function: str
    handler_role: str
    deployer_role: str  # the CloudFormation execution role of the stack
    cluster: str
    access_entries: str  # every access entry of the cluster
    # The role the CDK CLI deploys with, which alone passes deployer_role to CloudFormation;
    # None with the account's shared bootstrap (the guard does not reach into other apps).
    deploy_role: str | None


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
            deny(
                "OnlyCloudFormationGrantsAccessToTheCluster",
                ACCESS_ENTRIES,
                [arns.cluster, arns.access_entries],
                arns.deployer_role,
            ),
        ]
        + (
            [
                deny(
                    "OnlyThisAppsDeployRolePassesItsExecutionRole",
                    ("iam:PassRole",),
                    [arns.deployer_role],
                    arns.deploy_role,
                )
            ]
            if arns.deploy_role
            else []
        ),
    }


def bootstrap_role(template: str, qualifier: str, stack: Stack) -> str:
    """A role of the bootstrap, as DefaultStackSynthesizer names it: its ARN template with the
    qualifier (and a concrete region) filled in, the rest left to CloudFormation."""
    arn = template.replace("${Qualifier}", qualifier)
    if not Token.is_unresolved(stack.region):
        arn = arn.replace("${AWS::Region}", stack.region)
    return Fn.sub(arn)


def provider_arns(cluster: eks.Cluster, bootstrap_qualifier: str | None) -> KubectlProviderArns:
    provider = cluster.kubectl_provider
    functions = {f.node.path: f for f in resources_of_type(provider, "AWS::Lambda::Function")}
    roles = {r.node.path: r for r in resources_of_type(provider, "AWS::IAM::Role")}

    def one(found: dict[str, Any], framework: bool) -> Any:
        (match,) = [r for path, r in found.items() if ("framework" in path) == framework]
        return match

    stack = Stack.of(cluster)
    qualifier = bootstrap_qualifier or DefaultStackSynthesizer.DEFAULT_QUALIFIER
    if isinstance(stack.synthesizer, DefaultStackSynthesizer):
        deployer = bootstrap_role(
            DefaultStackSynthesizer.DEFAULT_CLOUDFORMATION_ROLE_ARN, qualifier, stack
        )
        deploy_role = (
            bootstrap_role(DefaultStackSynthesizer.DEFAULT_DEPLOY_ROLE_ARN, qualifier, stack)
            if bootstrap_qualifier
            else None
        )
    else:
        deployer, deploy_role = "<the role CloudFormation deploys this stack with>", None
    access_entries = stack.format_arn(
        service="eks", resource="access-entry", resource_name=f"{cluster.cluster_name}/*"
    )
    return KubectlProviderArns(
        framework_function=one(functions, True).attr_arn,
        framework_role=one(roles, True).attr_arn,
        handler_function=one(functions, False).attr_arn,
        handler_role=one(roles, False).attr_arn,
        deployer_role=deployer,
        cluster=cluster.cluster_arn,
        access_entries=access_entries,
        deploy_role=deploy_role,
    )


class KubectlProviderGuard(Construct):
    """Publishes ``policy`` (the SCP as a document with tokens) and the output that prints it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        bootstrap_qualifier: str | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.arns = provider_arns(cluster, bootstrap_qualifier)
        self.policy = guard_policy(self.arns)
        CfnOutput(
            self,
            "KubectlProviderGuardScp",
            value=Stack.of(self).to_json_string(self.policy),
            description="Service control policy: only CloudFormation may run or change the "
            "cluster-admin kubectl provider or grant access entries on the cluster "
            "(docs/security.md, 'The deploy path')",
        )
