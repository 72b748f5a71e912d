"""Where the stacks' Session Manager tunnels lead, and who may open them.

A port forward connects from the node its session runs on, and the VPC CNI admits a pod's own
node on every port (tests/network_policy_model.py, the node-IP rule): a tunnel whose destination
the caller chooses reaches Serve's port unsigned, the Ray dashboard and the GCS. So every tunnel
the stacks offer is a Session document of their own with a fixed destination, and the managed
policy each stack emits opens its document on this cluster's nodes and nothing else: no shell,
no other document, no other instance (tests/session_manager_model.py)."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest

from constructs.common.session_tunnel import NODE_TAG
from serving_manifests.names import (
    DASHBOARD_PORT,
    KUBERAY_CLUSTER_LABEL,
    KUBERAY_NODE_TYPE_LABEL,
    METRICS_PORT,
    SERVE_PORT,
)
from tests.configurations import render_deployed
from tests.conftest import Synthesized
from tests.network_policy_model import Cluster, Flow, Pod
from tests.session_manager_model import (
    AWS_REMOTE_HOST_CONTENT,
    AWS_REMOTE_HOST_DOCUMENT,
    CALLERS_CHOICE,
    DEFAULT_SHELL_DOCUMENT,
    Instance,
    destination,
    document_arn,
    may_start_session,
)

ACCOUNT = "123456789012"
GCS_PORT = 6379
NODE_IP = "10.0.64.200"  # the node the session runs on, which the Ray pods below share
# Each stack's tunnel: its command output and the policy output that opens it.
TUNNELS = {
    "cluster": ("ApiTunnelCommand", "ApiTunnelPolicy"),
    "serving": ("EndpointTunnelCommand", "EndpointTunnelPolicy"),
}


def _text(value: Any) -> str:
    """An output's value with every token written as X (the document name is plain text)."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        return "".join(_text(part) for part in value["Fn::Join"][1])
    return "X"


def _resolve(value: Any, region: str) -> Any:
    """A policy document's values as a deployment in ACCOUNT shows them."""
    if isinstance(value, list):
        return [_resolve(v, region) for v in value]
    if isinstance(value, dict):
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(_resolve(p, region) for p in parts)
        if value.get("Ref") == "AWS::AccountId":
            return ACCOUNT
        if value.get("Ref") == "AWS::Partition":
            return "aws"
        if value.get("Ref") == "AWS::Region":
            return region
        return {k: _resolve(v, region) for k, v in value.items()}
    return value


def _offered(synthesized: Synthesized) -> list[tuple[str, str, dict[str, Any]]]:
    """(stack role, document name, document content) of every tunnel command the stacks print."""
    offered = []
    for role, (output, _) in TUNNELS.items():
        outputs = synthesized.templates[role]["Outputs"]
        if output not in outputs:
            continue
        words = shlex.split(_text(outputs[output]["Value"]))
        name = words[words.index("--document-name") + 1]
        own = {
            d["Properties"]["Name"]: d["Properties"]["Content"]
            for d in synthesized.resources(role, "AWS::SSM::Document").values()
        }
        if name == AWS_REMOTE_HOST_DOCUMENT:
            offered.append((role, name, AWS_REMOTE_HOST_CONTENT))
        else:
            assert name in own, f"{output} names {name}, which no stack creates"
            offered.append((role, name, own[name]))
    return offered


def _ray_pods_on_one_node(synthesized: Synthesized) -> tuple[Cluster, list[Pod]]:
    """The rendered network policies, and the head and every worker group's pod on NODE_IP."""
    settings = synthesized.settings
    manifests = render_deployed(settings)
    ns = settings.serving.namespace
    config = manifests.rayservice["spec"]["rayClusterConfig"]
    groups = [("head", "head", config["headGroupSpec"]["template"])] + [
        (group["groupName"], "worker", group["template"]) for group in config["workerGroupSpecs"]
    ]
    pods = [
        Pod(
            name,
            ns,
            {
                **template["metadata"]["labels"],
                KUBERAY_CLUSTER_LABEL: "ray",
                KUBERAY_NODE_TYPE_LABEL: node_type,
            },
            f"10.0.64.{10 + index}",
            NODE_IP,
        )
        for index, (name, node_type, template) in enumerate(groups)
    ]
    namespaces = {ns: {"kubernetes.io/metadata.name": ns}}
    return Cluster(policies=manifests.network_policies, namespaces=namespaces), pods


def test_no_tunnel_the_stacks_offer_reaches_a_ray_pod(default_app: Synthesized) -> None:
    """A tunnel reaches a pod port when its destination may be that pod and the network
    policies let the node in: with a caller-chosen destination they do, on every port."""
    model, pods = _ray_pods_on_one_node(default_app)
    offered = _offered(default_app)
    assert {role for role, _, _ in offered} == set(TUNNELS)  # the default has both
    for _, name, content in offered:
        host, port = destination(content)
        for pod in pods:
            for pod_port in (SERVE_PORT, DASHBOARD_PORT, GCS_PORT, METRICS_PORT):
                may_lead_there = host in (CALLERS_CHOICE, pod.ip) and port in (
                    CALLERS_CHOICE,
                    str(pod_port),
                )
                admitted = model.allows(Flow(NODE_IP, pod, pod_port))
                assert not (may_lead_there and admitted), (
                    f"{name} through a node reaches {pod.name}:{pod_port}"
                )


def test_the_remote_host_document_would_reach_serve_through_the_node_ip_rule(
    default_app: Synthesized,
) -> None:
    """Why the stacks do not offer AWS's document: the same check, on it, finds Serve's port."""
    model, pods = _ray_pods_on_one_node(default_app)
    assert destination(AWS_REMOTE_HOST_CONTENT) == (CALLERS_CHOICE, CALLERS_CHOICE)
    assert all(model.allows(Flow(NODE_IP, pod, SERVE_PORT)) for pod in pods)


@pytest.mark.parametrize("role", list(TUNNELS))
def test_a_tunnel_document_lets_the_caller_choose_only_the_local_port(
    default_app: Synthesized, role: str
) -> None:
    ((_, _, content),) = [t for t in _offered(default_app) if t[0] == role]
    assert set(content["parameters"]) == {"localPortNumber"}
    host, port = destination(content)
    assert CALLERS_CHOICE not in (host, port)
    assert not re.search(r"\{\{", str(host) + str(port))


def _policy(synthesized: Synthesized, role: str) -> dict[str, Any]:
    (policy,) = [
        resource["Properties"]["PolicyDocument"]
        for logical_id, resource in synthesized.resources(role, "AWS::IAM::ManagedPolicy").items()
        if TUNNELS[role][1] in logical_id
    ]
    return _resolve(policy, synthesized.settings.region)


def _instance(region: str, tags: dict[str, str]) -> Instance:
    return Instance(f"arn:aws:ec2:{region}:{ACCOUNT}:instance/i-0123456789abcdef0", tags)


# (what the caller tries, the instance's eks:cluster-name tag: "ours", another or none, the
# document, allowed)
OWN = "<the stack's tunnel document>"
START_SESSION_CASES = [
    ("the stack's tunnel on a node of this cluster", "ours", OWN, True),
    ("AWS's any-host port forward on the same node", "ours", AWS_REMOTE_HOST_DOCUMENT, False),
    ("a session without a document: the shell", "ours", None, False),
    ("the shell document by name", "ours", DEFAULT_SHELL_DOCUMENT, False),
    ("the stack's tunnel on another cluster's node", "other-cluster", OWN, False),
    ("the stack's tunnel on an instance without the tag", None, OWN, False),
]


@pytest.mark.parametrize("role", list(TUNNELS))
@pytest.mark.parametrize(
    ("attempt", "tag", "document", "allowed"),
    START_SESSION_CASES,
    ids=[case[0] for case in START_SESSION_CASES],
)
def test_the_tunnel_policy_opens_its_tunnel_and_nothing_else(
    default_app: Synthesized,
    role: str,
    attempt: str,
    tag: str | None,
    document: str | None,
    allowed: bool,
) -> None:
    settings = default_app.settings
    ((_, own, _),) = [t for t in _offered(default_app) if t[0] == role]
    cluster = settings.cluster_name if tag == "ours" else tag
    instance = _instance(settings.region, {NODE_TAG: cluster} if cluster else {})
    operator = f"arn:aws:iam::{ACCOUNT}:role/Operator"
    decided = may_start_session(
        [_policy(default_app, role)],
        operator,
        ACCOUNT,
        settings.region,
        instance,
        own if document == OWN else document,
    )
    assert decided is allowed, attempt


def test_the_readmes_old_grant_opened_a_shell_and_any_destination() -> None:
    """What the README asked for before: StartSession on the cluster's instances and AWS's
    remote-host document, without the document access check. The model's reading of it."""
    region = "us-west-2"
    old = {
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "ssm:StartSession",
                "Resource": [
                    f"arn:aws:ec2:{region}:{ACCOUNT}:instance/*",
                    document_arn(region, ACCOUNT, AWS_REMOTE_HOST_DOCUMENT),
                ],
            }
        ]
    }
    operator = f"arn:aws:iam::{ACCOUNT}:role/Operator"
    node = _instance(region, {NODE_TAG: "pd-llm"})
    assert may_start_session([old], operator, ACCOUNT, region, node, AWS_REMOTE_HOST_DOCUMENT)
    assert may_start_session([old], operator, ACCOUNT, region, node, None)  # a root shell
    assert not may_start_session([old], operator, ACCOUNT, region, node, DEFAULT_SHELL_DOCUMENT)
