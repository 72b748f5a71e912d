"""Kubernetes RBAC as the API server evaluates it, and the API requests a kubectl command makes.

RBAC (kubernetes pkg/apis/rbac/v1/evaluation_helpers.go and plugin/pkg/auth/authorizer/rbac/
rbac.go, v1.35): a request is allowed when one rule of one role bound to the user allows it; a
rule allows it when its verbs hold the verb or "*", its apiGroups the group or "*", its resources
"*", the exact "resource/subresource", or "*/subresource" for a subresource request, and its
resourceNames are empty or hold the request's name (a request without a name, such as list or
create, never matches a rule with resourceNames). A RoleBinding grants its role's rules in its
own namespace only; a ClusterRoleBinding grants them everywhere, and alone grants cluster-scoped
resources and requests across all namespaces. There is no deny.

kubectl (k8s.io/kubectl v0.35, pkg/cmd and pkg/describe, pkg/drain): the requests each
documented command sends, in the order it sends them; only the ones whose failure fails the
command are listed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

ALL_NAMESPACES = ""  # a request across every namespace (kubectl -A, or describe/drain of a node)


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str | None = None  # None: a cluster-scoped resource; "" every namespace
    name: str = ""

    def __str__(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = "cluster" if self.namespace is None else self.namespace or "all namespaces"
        return f"{self.verb} {self.group or 'core'}/{resource} {self.name} in {where}".strip()


def _rule_allows(rule: dict[str, Any], request: Request) -> bool:
    if "nonResourceURLs" in rule:
        return False
    verbs, groups = rule.get("verbs", []), rule.get("apiGroups", [])
    if "*" not in verbs and request.verb not in verbs:
        return False
    if "*" not in groups and request.group not in groups:
        return False
    combined = (
        f"{request.resource}/{request.subresource}" if request.subresource else request.resource
    )
    resources = rule.get("resources", [])
    resource_ok = "*" in resources or combined in resources
    if not resource_ok and request.subresource:
        resource_ok = f"*/{request.subresource}" in resources
    if not resource_ok:
        return False
    names = rule.get("resourceNames", [])
    return not names or request.name in names


@dataclass(frozen=True)
class Authorizer:
    """The roles and bindings of a set of manifests, for the subjects of one group."""

    objects: tuple[dict[str, Any], ...]
    group: str

    def _bound_rules(self) -> list[tuple[str | None, list[dict[str, Any]]]]:
        """(namespace the rules apply in, or None for everywhere; the rules)."""
        roles = {
            (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o.get("rules", [])
            for o in self.objects
            if o["kind"] in ("Role", "ClusterRole")
        }
        bound = []
        for binding in self.objects:
            if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            subjects = binding.get("subjects", [])
            if not any(s["kind"] == "Group" and s["name"] == self.group for s in subjects):
                continue
            ref = binding["roleRef"]
            namespace = binding["metadata"].get("namespace")
            # A RoleBinding's Role lives in the binding's namespace; a ClusterRole has none.
            role_namespace = namespace if ref["kind"] == "Role" else None
            rules = roles.get((ref["kind"], role_namespace, ref["name"]), [])
            scope = namespace if binding["kind"] == "RoleBinding" else None
            bound.append((scope, rules))
        return bound

    def allows(self, request: Request) -> bool:
        for scope, rules in self._bound_rules():
            if scope is not None and request.namespace != scope:
                continue  # a RoleBinding covers its namespace only, never all or cluster scope
            if any(_rule_allows(rule, request) for rule in rules):
                return True
        return False


# kubectl's short names and singulars for the types the docs use (kubectl api-resources).
RESOURCE_TYPES: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("pod", "pods", "po"), ("", "pods")),
    **dict.fromkeys(("node", "nodes", "no"), ("", "nodes")),
    **dict.fromkeys(("service", "services", "svc"), ("", "services")),
    **dict.fromkeys(("secret", "secrets"), ("", "secrets")),
    **dict.fromkeys(("event", "events", "ev"), ("", "events")),
    **dict.fromkeys(("deployment", "deployments", "deploy"), ("apps", "deployments")),
    **dict.fromkeys(("job", "jobs"), ("batch", "jobs")),
    **dict.fromkeys(("rayservice", "rayservices"), ("ray.io", "rayservices")),
    **dict.fromkeys(("raycluster", "rayclusters"), ("ray.io", "rayclusters")),
    **dict.fromkeys(
        ("networkpolicy", "networkpolicies", "netpol"), ("networking.k8s.io", "networkpolicies")
    ),
    **dict.fromkeys(
        ("pdb", "poddisruptionbudget", "poddisruptionbudgets"), ("policy", "poddisruptionbudgets")
    ),
}
CLUSTER_SCOPED = {"nodes"}
# Flags that take a value (the next word when not written as --flag=value).
VALUED_FLAGS = {
    "-n",
    "--namespace",
    "-l",
    "--selector",
    "-o",
    "--output",
    "-L",
    "-p",
    "--patch",
    "--type",
    "-f",
    "--filename",
    "-c",
    "--container",
    "--tail",
    "--since",
}


class UnknownCommandError(ValueError):
    """A command this model does not know: teach it before documenting the command."""


def _words(command: str) -> list[str]:
    command = re.sub(r"<[^>]*>", "NAME", command)  # a placeholder is one word
    command = re.split(r"\s\\?\|\s", command)[0]  # what is piped onward is not kubectl's
    return shlex.split(command)


def kubectl_requests(command: str) -> list[Request]:
    words = _words(command)
    if not words or words[0] != "kubectl":
        raise UnknownCommandError(command)
    flags: dict[str, str] = {}
    args: list[str] = []
    index = 1
    while index < len(words):
        word = words[index]
        if word.startswith("-"):
            key, _, value = word.partition("=")
            if key in VALUED_FLAGS and not value:
                index += 1
                value = words[index]
            flags[key] = value
        else:
            args.append(word)
        index += 1
    namespace = flags.get("-n", flags.get("--namespace", "default"))
    if "-A" in flags or "--all-namespaces" in flags:
        namespace = ALL_NAMESPACES
    if not args:
        raise UnknownCommandError(command)
    verb, rest = args[0], args[1:]
    handler = _COMMANDS.get(verb)
    if handler is None:
        raise UnknownCommandError(command)
    return handler(rest, namespace, flags, command)


def _resource(word: str, command: str) -> tuple[str, str]:
    if word not in RESOURCE_TYPES:
        raise UnknownCommandError(f"{command}: resource type {word!r}")
    return RESOURCE_TYPES[word]


def _scoped(resource: str, namespace: str) -> str | None:
    return None if resource in CLUSTER_SCOPED else namespace


def _type_and_name(rest: list[str], command: str) -> tuple[str, str, str]:
    if not rest:
        raise UnknownCommandError(command)
    if "/" in rest[0]:
        kind, name = rest[0].split("/", 1)
    else:
        kind, name = rest[0], rest[1] if len(rest) > 1 else ""
    group, resource = _resource(kind, command)
    return group, resource, name


def _get(rest: list[str], namespace: str, flags: dict[str, str], command: str) -> list[Request]:
    group, resource, name = _type_and_name(rest, command)
    verb = "get" if name else "list"
    return [Request(verb, group, resource, namespace=_scoped(resource, namespace), name=name)]


def _describe(
    rest: list[str], namespace: str, flags: dict[str, str], command: str
) -> list[Request]:
    group, resource, name = _type_and_name(rest, command)
    scope = _scoped(resource, namespace)
    requests = [Request("get" if name else "list", group, resource, namespace=scope, name=name)]
    if resource == "nodes":
        # NodeDescriber: the pods on the node (field selector spec.nodeName, every namespace).
        requests.append(Request("list", "", "pods", namespace=ALL_NAMESPACES))
    # Every describer searches the object's events (a node's in every namespace).
    requests.append(Request("list", "", "events", namespace=scope or ALL_NAMESPACES))
    return requests


def _logs(rest: list[str], namespace: str, flags: dict[str, str], command: str) -> list[Request]:
    if not rest:
        raise UnknownCommandError(command)
    requests = []
    if "/" in rest[0] and not rest[0].startswith(("pod/", "pods/", "po/")):
        group, resource, name = _type_and_name(rest, command)
        # logs of a controller: read it, list its pods by selector, then one pod's log.
        requests += [
            Request("get", group, resource, namespace=namespace, name=name),
            Request("list", "", "pods", namespace=namespace),
        ]
        pod = "NAME"
    else:
        pod = rest[0].split("/", 1)[-1]
        requests.append(Request("get", "", "pods", namespace=namespace, name=pod))
    requests.append(Request("get", "", "pods", "log", namespace=namespace, name=pod))
    return requests


def _port_forward(
    rest: list[str], namespace: str, flags: dict[str, str], command: str
) -> list[Request]:
    group, resource, name = _type_and_name(rest, command)
    requests = [Request("get", group, resource, namespace=namespace, name=name)]
    if resource != "pods":  # a Service or controller: one of its pods, by selector
        requests.append(Request("list", "", "pods", namespace=namespace))
    requests.append(Request("create", "", "pods", "portforward", namespace=namespace, name="NAME"))
    return requests


def _drain(rest: list[str], namespace: str, flags: dict[str, str], command: str) -> list[Request]:
    node = rest[0] if rest else "NAME"
    return [
        Request("get", "", "nodes", name=node),
        Request("patch", "", "nodes", name=node),  # cordon: spec.unschedulable
        Request("list", "", "pods", namespace=ALL_NAMESPACES),  # spec.nodeName=<node>
        Request("get", "apps", "daemonsets", namespace="kube-system", name="NAME"),
        Request("create", "", "pods", "eviction", namespace="llm-serving", name="NAME"),
        Request("get", "", "pods", namespace="llm-serving", name="NAME"),  # wait for deletion
    ]


def _patch(rest: list[str], namespace: str, flags: dict[str, str], command: str) -> list[Request]:
    group, resource, name = _type_and_name(rest, command)
    return [Request("patch", group, resource, namespace=_scoped(resource, namespace), name=name)]


def _apply(rest: list[str], namespace: str, flags: dict[str, str], command: str) -> list[Request]:
    """Server-side dry runs are authorized like the real request: apply reads each object, then
    creates or patches it. The rendered manifests under build/manifests/ include the RayService
    and the service accounts, so the first one is enough to decide."""
    if "-f" not in flags and "--filename" not in flags:
        raise UnknownCommandError(command)
    return [
        Request("get", "ray.io", "rayservices", namespace="llm-serving", name="NAME"),
        Request("create", "ray.io", "rayservices", namespace="llm-serving"),
    ]


def _cordon(rest: list[str], namespace: str, flags: dict[str, str], command: str) -> list[Request]:
    """cordon and uncordon: read the node, patch spec.unschedulable."""
    node = rest[0] if rest else "NAME"
    return [Request("get", "", "nodes", name=node), Request("patch", "", "nodes", name=node)]


def _delete(rest: list[str], namespace: str, flags: dict[str, str], command: str) -> list[Request]:
    group, resource, name = _type_and_name(rest, command)
    verb = "delete" if name else "deletecollection"
    return [Request(verb, group, resource, namespace=_scoped(resource, namespace), name=name)]


_COMMANDS = {
    "get": _get,
    "describe": _describe,
    "logs": _logs,
    "port-forward": _port_forward,
    "drain": _drain,
    "cordon": _cordon,
    "uncordon": _cordon,
    "delete": _delete,
    "patch": _patch,
    "apply": _apply,
}
