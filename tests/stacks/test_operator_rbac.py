"""What an operator (cluster.operator_principal_arns) may do on the cluster, decided as Kubernetes
RBAC decides it (tests/rbac_model.py): every kubectl command the docs give an operator works,
and nothing yields the Ray token, a service account's identity or the network policies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from constructs.cluster.cluster_autoscaler import DEPLOYMENT_NAME
from serving_manifests.operator_access import (
    AUTOSCALER_DEPLOYMENT,
    OPERATORS_GROUP,
    render_operator_rbac,
)
from tests.configurations import PROJECT_ROOT, settings_for
from tests.conftest import Synthesized
from tests.rbac_model import ALL_NAMESPACES, Authorizer, Request, kubectl_requests

SETTINGS = settings_for("default")
NAMESPACE = SETTINGS.serving.namespace
# Commands in the docs that only an admin can run, and why an operator may not.
ADMIN_ONLY = {
    "port-forward": "a port-forward reaches every port of a Ray pod, past the Ray token's guard "
    "on the NIXL side channels and raylet ports",
    "get secret": "the Ray cluster's token",
    "apply": "creating the RayService or a service account is running pods as its identity",
    "patch raycluster": "a RayCluster's pod templates choose the service account and command "
    "of the pods KubeRay creates",
}


def _documented_commands() -> list[str]:
    pages = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("**/*.md"))]
    commands = []
    for page in pages:
        text = page.read_text()
        spans = re.findall(r"`(kubectl [^`]+)`", text)
        blocks = re.findall(r"^\s*(kubectl .+?)\s*(?:#.*)?$", text, flags=re.MULTILINE)
        commands += [
            " ".join(c.split()) for c in spans + blocks if not c.startswith("kubectl provider")
        ]
    return sorted(set(commands))


def _admin_only(command: str) -> str | None:
    words = re.sub(r"\s-n\s+\S+", "", command).split()[1:]
    for prefix in ADMIN_ONLY:
        if " ".join(words).startswith(prefix):
            return prefix
    return None


def _operator() -> Authorizer:
    return Authorizer(tuple(render_operator_rbac(SETTINGS)), OPERATORS_GROUP)


DOCUMENTED = _documented_commands()


def test_the_docs_give_kubectl_commands_to_check() -> None:
    assert len(DOCUMENTED) >= 8, DOCUMENTED


@pytest.mark.parametrize("command", DOCUMENTED)
def test_every_documented_command_is_an_operators_or_said_to_be_an_admins(command: str) -> None:
    authorizer = _operator()
    denied = [str(r) for r in kubectl_requests(command) if not authorizer.allows(r)]
    if _admin_only(command):
        assert denied, f"{command!r} is listed as admin-only but an operator may run it"
    else:
        assert not denied, f"an operator cannot run {command!r}: {denied}"


def test_the_security_page_names_each_admin_only_command() -> None:
    page = (PROJECT_ROOT / "docs" / "security.md").read_text()
    section = page[page.index("**Who may do what on the cluster.**") :][:4000]
    for prefix in ADMIN_ONLY:
        assert f"`{prefix.split()[0]}" in section or prefix in section, prefix


# What would yield the Ray token, a Ray service account's identity (and its IAM role), or the
# network policies; checked in the serving namespace, in kube-system and everywhere.
FORBIDDEN = [
    Request("get", "", "secrets", name="pd-llm"),
    Request("list", "", "secrets"),
    Request("watch", "", "secrets"),
    Request("create", "", "pods"),
    Request("create", "", "pods", "exec", name="NAME"),
    Request("get", "", "pods", "exec", name="NAME"),
    Request("create", "", "pods", "attach", name="NAME"),
    Request("create", "", "pods", "portforward", name="NAME"),
    Request("create", "", "pods", "ephemeralcontainers", name="NAME"),
    Request("patch", "", "pods", "ephemeralcontainers", name="NAME"),
    Request("update", "", "pods", name="NAME"),
    Request("patch", "", "pods", name="NAME"),
    Request("create", "", "serviceaccounts", "token", name="ray-head"),
    Request("create", "", "serviceaccounts", "token", name="ray-worker"),
    Request("patch", "", "serviceaccounts", name="ray-worker"),
    Request("delete", "", "configmaps", name="NAME"),
    Request("delete", "networking.k8s.io", "networkpolicies", name="default-deny"),
    Request("patch", "networking.k8s.io", "networkpolicies", name="default-deny"),
    Request("create", "networking.k8s.io", "networkpolicies"),
    Request("update", "ray.io", "rayclusters", name="NAME"),
    Request("patch", "ray.io", "rayclusters", name="NAME"),
    Request("patch", "ray.io", "rayservices", name="pd-llm"),
    Request("create", "ray.io", "rayclusters"),
    Request("create", "ray.io", "rayjobs"),
    Request("create", "batch", "jobs"),
    Request("create", "batch", "cronjobs"),
    *(
        Request("create", "apps", kind)
        for kind in ("deployments", "daemonsets", "statefulsets", "replicasets")
    ),
    Request("patch", "apps", "deployments", name="cluster-autoscaler"),
    Request("create", "rbac.authorization.k8s.io", "rolebindings"),
    Request("bind", "rbac.authorization.k8s.io", "roles", name="NAME"),
    Request("escalate", "rbac.authorization.k8s.io", "roles", name="NAME"),
    Request("impersonate", "", "serviceaccounts", name="ray-head"),
    Request("create", "elbv2.k8s.aws", "targetgroupbindings"),
]


@pytest.mark.parametrize("request_", FORBIDDEN, ids=str)
@pytest.mark.parametrize("namespace", [NAMESPACE, "kube-system", ALL_NAMESPACES])
def test_nothing_yields_the_token_a_service_account_or_the_policies(
    request_: Request, namespace: str
) -> None:
    request_ = Request(**{**request_.__dict__, "namespace": namespace})
    assert not _operator().allows(request_), str(request_)


def test_cluster_scoped_rights_are_nodes_only() -> None:
    authorizer = _operator()
    assert authorizer.allows(Request("patch", "", "nodes", name="NAME"))
    for request in (
        Request("create", "", "nodes"),
        Request("delete", "", "nodes", name="NAME"),
        Request("patch", "", "nodes", "status", name="NAME"),
        Request("create", "", "namespaces"),
        Request("get", "", "persistentvolumes", name="NAME"),
        Request("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
        Request("create", "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ):
        assert not authorizer.allows(request), str(request)


def test_pod_proxy_admits_get_only() -> None:
    """pdctl verify reads the metrics with GET; POST through the proxy (verb create) could call
    the model API or the dashboard's job API."""
    authorizer = _operator()
    proxy = dict(resource="pods", subresource="proxy", namespace=NAMESPACE, name="NAME")
    assert authorizer.allows(Request("get", "", **proxy))
    for verb in ("create", "update", "patch", "delete"):
        assert not authorizer.allows(Request(verb, "", **proxy))


def test_the_autoscaler_log_role_names_the_chart_s_deployment() -> None:
    assert AUTOSCALER_DEPLOYMENT == DEPLOYMENT_NAME


def test_the_model_is_rbac_as_documented() -> None:
    """The model's own rules, on hand-written cases from the Kubernetes RBAC docs, so that a
    mistake in it cannot make every command above pass."""
    role = {
        "kind": "Role",
        "metadata": {"name": "r", "namespace": "a"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]},
            {
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "verbs": ["get"],
                "resourceNames": ["x"],
            },
        ],
    }
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": "b", "namespace": "a"},
        "roleRef": {"kind": "Role", "name": "r"},
        "subjects": [{"kind": "Group", "name": "g"}],
    }
    authorizer = Authorizer((role, binding), "g")
    assert authorizer.allows(Request("get", "", "pods", namespace="a", name="p"))
    assert not authorizer.allows(Request("get", "", "pods", "status", namespace="a", name="p"))
    assert authorizer.allows(Request("get", "", "pods", "log", namespace="a", name="p"))
    assert not authorizer.allows(Request("get", "", "pods", namespace="b", name="p"))
    assert not authorizer.allows(Request("get", "", "pods", namespace=ALL_NAMESPACES))
    assert not authorizer.allows(Request("list", "", "pods", namespace="a"))
    assert authorizer.allows(Request("get", "apps", "deployments", namespace="a", name="x"))
    assert not authorizer.allows(Request("get", "apps", "deployments", namespace="a", name="y"))
    assert not Authorizer((role, binding), "other").allows(
        Request("get", "", "pods", namespace="a", name="p")
    )


def test_the_serving_stack_applies_the_operator_rbac(default_app: Synthesized) -> None:
    applied = default_app.built.stacks.serving.ray_service.manifests.operator_rbac
    assert applied == render_operator_rbac(default_app.settings)
    kinds = sorted(o["kind"] for o in applied)
    assert kinds == sorted(
        ["Role", "Role", "ClusterRole", "RoleBinding", "RoleBinding", "ClusterRoleBinding"]
    )
    template = Path(
        default_app.outdir / f"{default_app.settings.stack_name('serving')}.template.json"
    ).read_text()
    assert OPERATORS_GROUP in template
