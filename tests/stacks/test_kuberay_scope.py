"""KubeRay reaches the serving namespace only, and its namespace exists before its Roles do.

The chart's rule, read from kuberay-operator 1.7.0 (ray-project/kuberay v1.7.0,
helm-chart/kuberay-operator/templates): role.yaml and rolebinding.yaml render a ClusterRole and
ClusterRoleBinding when `rbacEnable and not singleNamespaceInstall`;
multiple_namespaces_role(binding).yaml render a Role and RoleBinding in each of `watchNamespace`
(default: the release's namespace) when `rbacEnable and singleNamespaceInstall and
crNamespacedRbacEnable`; deployment.yaml passes `--watch-namespace` with `watchNamespace`
joined by commas (or the release namespace under singleNamespaceInstall), and none otherwise,
which makes the operator watch every namespace.
"""

from __future__ import annotations

import json
from typing import Any

from catalog.helm_charts import KUBERAY_OPERATOR
from tests.conftest import Synthesized

# values.yaml of chart 1.7.0 for the keys the rule reads.
CHART_DEFAULTS = {
    "rbacEnable": True,
    "crNamespacedRbacEnable": True,
    "singleNamespaceInstall": False,
}


def chart_rbac(values: dict[str, Any], release_namespace: str) -> dict[str, Any]:
    merged = {**CHART_DEFAULTS, **values}
    single = merged["singleNamespaceInstall"]
    watched = merged.get("watchNamespace") or []
    if single and not watched:
        watched = [release_namespace]
    return {
        "cluster_roles": merged["rbacEnable"] and not single,
        "role_namespaces": (watched or [release_namespace])
        if merged["rbacEnable"] and single and merged["crNamespacedRbacEnable"]
        else [],
        "watch_namespace_arg": ",".join(watched) if watched else None,
    }


def _kuberay_release(app: Synthesized) -> tuple[str, dict[str, Any]]:
    charts = app.resources("serving", "Custom::AWSCDK-EKS-HelmChart")
    (found,) = [
        (logical_id, chart)
        for logical_id, chart in charts.items()
        if chart["Properties"]["Chart"] == KUBERAY_OPERATOR.chart
    ]
    return found


def test_the_operator_is_installed_for_the_serving_namespace_only(default_app: Synthesized) -> None:
    _, chart = _kuberay_release(default_app)
    values = json.loads(chart["Properties"]["Values"])
    namespace = default_app.settings.serving.namespace
    rbac = chart_rbac(values, KUBERAY_OPERATOR.namespace)
    assert rbac == {
        "cluster_roles": False,
        "role_namespaces": [namespace],
        "watch_namespace_arg": namespace,
    }


def test_the_chart_rule_would_catch_a_cluster_wide_install() -> None:
    assert chart_rbac({}, "kuberay-system")["cluster_roles"] is True
    assert chart_rbac({}, "kuberay-system")["watch_namespace_arg"] is None
    single = chart_rbac({"singleNamespaceInstall": True}, "kuberay-system")
    assert single["role_namespaces"] == ["kuberay-system"]  # not where the Ray pods live


def _depends_on(template: dict[str, Any], logical_id: str) -> set[str]:
    """Every resource that ``logical_id`` waits for, directly or through others."""
    resources = template["Resources"]
    seen: set[str] = set()
    pending = [logical_id]
    while pending:
        current = pending.pop()
        depends = resources[current].get("DependsOn", [])
        for dependency in [depends] if isinstance(depends, str) else depends:
            if dependency not in seen:
                seen.add(dependency)
                pending.append(dependency)
    return seen


def test_the_namespace_exists_before_the_chart_puts_its_role_there(
    default_app: Synthesized,
) -> None:
    template = default_app.templates["serving"]
    release_id, _ = _kuberay_release(default_app)
    manifests = default_app.resources("serving", "Custom::AWSCDK-EKS-KubernetesResource")
    namespace_ids = [
        logical_id
        for logical_id, resource in manifests.items()
        if '"kind":"Namespace"'
        in json.dumps(resource["Properties"]["Manifest"]).replace("\\", "").replace(" ", "")
    ]
    assert len(namespace_ids) == 1
    assert namespace_ids[0] in _depends_on(template, release_id)
    # ...and the RayService goes (its finalizers run) before the operator does.
    ray_service_ids = [
        logical_id
        for logical_id, resource in manifests.items()
        if "RayService" in json.dumps(resource["Properties"]["Manifest"])
        and '\\"kind\\":\\"RayService\\"' in json.dumps(resource["Properties"]["Manifest"])
    ]
    assert len(ray_service_ids) == 1
    assert release_id in _depends_on(template, ray_service_ids[0])
