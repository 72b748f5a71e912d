"""checkov skips, written as resource metadata next to the resource (checkov reads
``Metadata.checkov.skip``), so each skip and its reason show in the template under review."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from aws_cdk import CfnResource, Stack

from constructs import IConstruct

# Reasons that hold for every Lambda that aws-cdk-lib's custom-resource frameworks create.
PROVIDER_LAMBDA_SKIPS: Mapping[str, str] = {
    "CKV_AWS_115": "Custom-resource handler that CloudFormation invokes once per resource "
    "operation (other callers are for IAM to refuse; the kubectl provider's guard SCP does); "
    "reserved concurrency could only throttle a deploy.",
    "CKV_AWS_116": "Invoked synchronously by CloudFormation's custom-resource framework; a failed "
    "invocation fails the stack operation, so a dead-letter queue would never be read.",
    "CKV_AWS_173": "Environment variables hold handler settings only, no secrets; Lambda encrypts "
    "them at rest with its service key.",
}


def skip_checks(resource: CfnResource, skips: Mapping[str, str]) -> None:
    existing = resource.get_metadata("checkov") or {}
    entries = list(existing.get("skip", []))
    entries += [{"id": check, "comment": reason} for check, reason in skips.items()]
    resource.add_metadata("checkov", {"skip": entries})


def resources_of_type(scope: IConstruct, cfn_type: str) -> Iterator[CfnResource]:
    for child in scope.node.find_all():
        if isinstance(child, CfnResource) and child.cfn_resource_type == cfn_type:
            yield child


# Singleton providers aws-cdk-lib adds to a stack: for CfnJson (IRSA trust conditions) and for
# AwsCustomResource (the node groups' Auto Scaling group names).
CFN_UTILS_PROVIDER_ID = "AWSCDKCfnUtilsProviderCustomResourceProvider"
AWS_CUSTOM_RESOURCE_PROVIDER_ID = "AWS679f53fac002430cb0da5b7982bd2287"
# For a throw-away deployment's access-log bucket (empties it before CloudFormation deletes it).
S3_AUTO_DELETE_PROVIDER_ID = "Custom::S3AutoDeleteObjectsCustomResourceProvider"
SINGLETON_PROVIDER_OUTSIDE_VPC = {
    CFN_UTILS_PROVIDER_ID: "Turns CloudFormation values into JSON inside the deployment and "
    "calls no network service, so it has no reason to run in the VPC.",
    AWS_CUSTOM_RESOURCE_PROVIDER_ID: "Calls the regional EKS API (DescribeNodegroup) at deploy "
    "time and nothing inside the VPC, so it has no reason to run in it.",
    S3_AUTO_DELETE_PROVIDER_ID: "Calls the regional S3 API to empty one bucket when the stack "
    "is destroyed, and nothing inside the VPC.",
}


def skip_singleton_provider_checks(stack: Stack) -> None:
    """Called once per stack after its constructs exist: the providers appear wherever their
    constructs are used, including inside aws-cdk-lib's own (the load balancer controller)."""
    for provider_id, outside_vpc in SINGLETON_PROVIDER_OUTSIDE_VPC.items():
        provider = stack.node.try_find_child(provider_id)
        if provider is None:
            continue
        for function in resources_of_type(provider, "AWS::Lambda::Function"):
            skip_checks(function, {**PROVIDER_LAMBDA_SKIPS, "CKV_AWS_117": outside_vpc})
