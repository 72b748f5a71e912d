"""What Kubernetes, the kubelet and EKS accept as node label and taint keys and values.

Kubernetes: a key is an optional DNS-subdomain prefix (at most 253 characters) and '/', then a
name of 1-63 characters; a value is at most 63 characters (apimachinery validation,
IsQualifiedName / IsValidLabelValue). EKS is stricter for managed node groups: label keys and
values 1-63 characters, taint keys 1-63, taint values at most 63, at most 50 taints per node
group (EKS API reference, UpdateLabelsPayload and Taint; EKS user guide, "Amazon EKS service
quotas"). Prefixes in the kubernetes.io and k8s.io domains belong to Kubernetes: the kubelet
refuses to set such node labels outside kubelet.kubernetes.io and node.kubernetes.io
(NodeRestriction, kubelet --node-labels), and node.kubernetes.io taints are the node
lifecycle controller's. EKS sets the eks.amazonaws.com labels itself.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

EKS_KEY_MAX = 63
EKS_TAINTS_PER_NODE_GROUP = 50
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
RESERVED_DOMAINS = ("kubernetes.io", "k8s.io", "eks.amazonaws.com")
# Label prefixes in a reserved domain that the kubelet lets a node set on itself.
KUBELET_LABEL_DOMAINS = ("kubelet.kubernetes.io", "node.kubernetes.io")


def _key(key: str) -> str:
    if not _LABEL_KEY.fullmatch(key) or len(key.partition("/")[0]) > 253:
        raise ValueError(
            f"{key!r} is not a Kubernetes label key: an optional DNS prefix and '/', then a name "
            "of 1-63 characters, letters, digits, '-', '_' or '.', starting and ending with a "
            "letter or digit"
        )
    if len(key) > EKS_KEY_MAX:
        raise ValueError(
            f"{key!r} has {len(key)} characters; EKS takes node label and taint keys of at most "
            f"{EKS_KEY_MAX}, prefix included"
        )
    return key


def _value(value: str) -> str:
    if not _LABEL_VALUE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Kubernetes label value: at most 63 characters, letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit (or empty)"
        )
    return value


def _non_empty(value: str) -> str:
    if not value:
        raise ValueError("empty; EKS takes node label values of 1-63 characters")
    return value


def reserved_domain(key: str, allowed: tuple[str, ...] = ()) -> str | None:
    """The reserved domain a key's prefix falls in, or None (``allowed`` domains excepted)."""
    prefix, slash, _ = key.rpartition("/")
    if not slash or prefix in allowed:
        return None
    return next(
        (
            domain
            for domain in RESERVED_DOMAINS
            if prefix == domain or prefix.endswith(f".{domain}")
        ),
        None,
    )


LabelKey = Annotated[str, AfterValidator(_key)]
LabelValue = Annotated[str, AfterValidator(_value)]
NodeLabelValue = Annotated[str, AfterValidator(_value), AfterValidator(_non_empty)]
