"""AWS tags the user adds to every resource: what every AWS service accepts, counted with the
tags the app, the CDK and EKS put on the same resource.

Tagging AWS resources, "Tag naming limits and requirements": at most 50 tags per resource (aws:
tags excepted: they do not count and users cannot set them), keys 1-128 and values 0-256
characters, Unicode letters, digits, spaces and _ . : / = + - @.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

TAGS_PER_RESOURCE = 50
# The most tags beside the user's on one resource: EKS tags each instance of a managed node
# group with eks:cluster-name, eks:nodegroup-name, kubernetes.io/cluster/<name> and the Cluster
# Autoscaler's two discovery tags (EKS user guide, "Managed node groups"; they propagate from the
# group's Auto Scaling group); the CDK puts four on each subnet (Name, aws-cdk:subnet-name,
# aws-cdk:subnet-type and the load balancer controller's role tag). tests/stacks check the
# templates' side of this number.
TAGS_ADDED_BY_APP = 5
# Keys whose owners read them: the Cluster Autoscaler (its discovery and node-template tags, which
# a user tag on the node groups would override), Kubernetes' cloud provider and the load
# balancer controller (kubernetes.io/...), EKS (eks:) and the CDK (aws-cdk:).
RESERVED_KEY_PREFIXES = ("aws:", "k8s.io/", "kubernetes.io/", "eks:", "aws-cdk:")
_TAG_TEXT = re.compile(r"[\w .:/=+\-@]*")


def _tags(tags: dict[str, str]) -> dict[str, str]:
    room = TAGS_PER_RESOURCE - TAGS_ADDED_BY_APP
    if len(tags) > room:
        raise ValueError(
            f"{len(tags)} tags; a resource takes {TAGS_PER_RESOURCE} and the app, the CDK and EKS "
            f"add up to {TAGS_ADDED_BY_APP} to some: at most {room}"
        )
    _no_keys_differing_only_in_case(tags)
    for key, value in tags.items():
        reserved = next((p for p in RESERVED_KEY_PREFIXES if key.lower().startswith(p)), None)
        if reserved:
            raise ValueError(
                f"tag key {key!r}: keys starting with {reserved} belong to AWS, EKS, Kubernetes "
                "or the CDK, which set or read them; choose another key"
            )
        if not 1 <= len(key) <= 128:
            raise ValueError(f"tag key {key!r} must be 1-128 characters")
        if len(value) > 256:
            raise ValueError(f"tag {key!r}: a value may have at most 256 characters")
        for text in (key, value):
            if not _TAG_TEXT.fullmatch(text):
                raise ValueError(
                    f"tag {key!r}: {text!r} has characters AWS tags do not allow; use "
                    "letters, digits, spaces and _ . : / = + - @"
                )
    return tags


def _no_keys_differing_only_in_case(tags: dict[str, str]) -> None:
    """IAM takes the tag keys of roles case-insensitively (IAM user guide, "Tags for AWS Identity
    and Access Management resources", Case sensitivity) and CreateRole refuses two keys that
    differ only in case ("Duplicate tag keys found. Please note that Tag keys are case
    insensitive."; aws/aws-cdk#26253), and the tags reach the app's IAM roles (Tags.of(app))."""
    seen: dict[str, str] = {}
    for key in tags:
        first = seen.setdefault(key.casefold(), key)
        if first != key:
            raise ValueError(
                f"tag keys {first!r} and {key!r} differ only in case; IAM takes tag keys "
                "case-insensitively and refuses a role with both (CreateRole: 'Duplicate tag "
                "keys found'): keep one"
            )


Tags = Annotated[dict[str, str], AfterValidator(_tags)]
