"""The Kubernetes RBAC of the service's operators (manifests/operator-rbac.yaml), bound to the
group that their EKS access entries carry."""

from __future__ import annotations

from typing import Any

from app_config import Settings
from app_config.derived_names import operator_rbac_prefix
from serving_manifests.templates import load_all

# The Kubernetes group of every operator's access entry (EKS refuses names that start with
# system:, eks:, aws:, amazon: or iam:); the bindings below name it, nothing else does.
OPERATORS_GROUP = "llm-serving:operators"
# Where `kubectl -n kube-system logs deploy/cluster-autoscaler` reads: the Deployment that the
# chart's fullnameOverride names (constructs/cluster/cluster_autoscaler.py; a test ties the two).
AUTOSCALER_NAMESPACE = "kube-system"
AUTOSCALER_DEPLOYMENT = "cluster-autoscaler"


def render_operator_rbac(settings: Settings) -> list[dict[str, Any]]:
    """Roles in the serving namespace and in kube-system, one ClusterRole for nodes, and their
    bindings to OPERATORS_GROUP. Names carry the RayService's name, so two deployments on one
    cluster do not share (or delete) each other's."""
    documents = load_all("operator-rbac.yaml")
    prefix = operator_rbac_prefix(settings)
    template_prefix = "llm-serving-operator"
    for document in documents:
        metadata = document["metadata"]
        metadata["name"] = metadata["name"].replace(template_prefix, prefix, 1)
        if "namespace" in metadata:
            in_kube_system = metadata["namespace"] == AUTOSCALER_NAMESPACE
            metadata["namespace"] = (
                AUTOSCALER_NAMESPACE if in_kube_system else settings.serving.namespace
            )
        if "roleRef" in document:
            document["roleRef"]["name"] = document["roleRef"]["name"].replace(
                template_prefix, prefix, 1
            )
            document["subjects"] = [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": OPERATORS_GROUP}
            ]
        for rule in document.get("rules", []):
            if rule.get("resourceNames") and "deployments" in rule["resources"]:
                rule["resourceNames"] = [AUTOSCALER_DEPLOYMENT]
    return documents
