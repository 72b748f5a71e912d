"""Reaching the private API server and the internal load balancer: the stack outputs the README's
recipe runs are real commands, aimed at resources the same templates create.

Commands are checked against AWS's own service models (botocore) for the operations and filters
they name, and their tokens against the template's resources; the README recipe may only name
outputs that the stacks have."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any

import botocore.session
import pytest

from stacks.tunnel import API_LOCAL_PORT, ENDPOINT_LOCAL_PORT, NODE_TAG, PORT_FORWARD_DOCUMENT
from tests.configurations import CONFIGURATIONS, PROJECT_ROOT
from tests.conftest import Synthesized

# AWS-StartPortForwardingSessionToRemoteHost's parameters (Systems Manager user guide, "Port
# forwarding to a remote host"): the document, not the SSM API, defines them.
PORT_FORWARD_PARAMETERS = {"host", "portNumber", "localPortNumber"}
EXAMPLE_API_HOST = "0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com"
EXAMPLE_NLB_HOST = "pd-llm-endpoint-0123456789abcdef.elb.us-west-2.amazonaws.com"
BOTOCORE = botocore.session.get_session()


def _command(template: dict[str, Any], output: str, tokens: Callable[[Any], str]) -> list[str]:
    """The output's shell words, each CloudFormation token replaced by ``tokens(token)``."""
    value = template["Outputs"][output]["Value"]
    parts = value["Fn::Join"][1] if isinstance(value, dict) else [value]
    return shlex.split("".join(part if isinstance(part, str) else tokens(part) for part in parts))


def _resource_type(template: dict[str, Any], logical_id: str) -> str:
    return template["Resources"][logical_id]["Type"]


def _cluster_tokens(template: dict[str, Any]) -> Callable[[Any], str]:
    def resolve(token: Any) -> str:
        if "Fn::Select" in token:  # the host of the cluster's endpoint URL
            index, split = token["Fn::Select"]
            separator, source = split["Fn::Split"]
            logical_id, attribute = source["Fn::GetAtt"]
            assert (index, separator, attribute) == (2, "/", "Endpoint")
            assert _resource_type(template, logical_id) == "AWS::EKS::Cluster"
            return f"https://{EXAMPLE_API_HOST}".split(separator)[index]
        logical_id, attribute = token["Fn::GetAtt"]
        assert (_resource_type(template, logical_id), attribute) == ("AWS::EKS::Cluster", "Arn")
        return "arn:aws:eks:us-west-2:123456789012:cluster/pd-llm"

    return resolve


def _serving_tokens(template: dict[str, Any]) -> Callable[[Any], str]:
    def resolve(token: Any) -> str:
        logical_id, attribute = token["Fn::GetAtt"]
        assert attribute == "DNSName"
        assert _resource_type(template, logical_id) == "AWS::ElasticLoadBalancingV2::LoadBalancer"
        return EXAMPLE_NLB_HOST

    return resolve


def _options(words: list[str]) -> dict[str, str]:
    return {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}


def _check_port_forward(words: list[str], cluster_name: str, host: str, port: int, local: int):
    assert words[:3] == ["aws", "ssm", "start-session"]
    options = _options(words)
    start_session = BOTOCORE.get_service_model("ssm").operation_model("StartSession")
    for option in ("--target", "--document-name", "--parameters"):
        member = "".join(part.capitalize() for part in option[2:].split("-"))
        assert member in start_session.input_shape.members
    assert options["--document-name"] == PORT_FORWARD_DOCUMENT
    parameters = dict(item.split("=", 1) for item in options["--parameters"].split(","))
    assert set(parameters) == PORT_FORWARD_PARAMETERS
    assert parameters == {"host": host, "portNumber": str(port), "localPortNumber": str(local)}
    # The target: a shell substitution that asks EC2 for a running node of this cluster.
    finder = shlex.split(options["--target"].removeprefix("$(").removesuffix(")"))
    assert finder[:3] == ["aws", "ec2", "describe-instances"]
    filters_doc = (
        BOTOCORE.get_service_model("ec2")
        .operation_model("DescribeInstances")
        .input_shape.members["Filters"]
        .documentation
    )
    filters = finder[finder.index("--filters") + 1 : finder.index("--query")]
    names = dict(f.removeprefix("Name=").split(",Values=") for f in filters)
    assert names == {f"tag:{NODE_TAG}": cluster_name, "instance-state-name": "running"}
    assert "tag:&lt;key&gt;" in filters_doc
    assert "instance-state-name" in filters_doc


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_the_api_tunnel_reaches_the_clusters_endpoint_through_one_of_its_nodes(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    synthesized = synthesize(configuration)
    template = synthesized.templates["cluster"]
    (cluster,) = synthesized.resources("cluster", "AWS::EKS::Cluster").values()
    words = _command(template, "ApiTunnelCommand", _cluster_tokens(template))
    _check_port_forward(words, cluster["Properties"]["Name"], EXAMPLE_API_HOST, 443, API_LOCAL_PORT)


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_kubectl_goes_through_the_tunnel_and_still_checks_the_servers_name(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    synthesized = synthesize(configuration)
    template = synthesized.templates["cluster"]
    words = _command(template, "TunnelKubeconfigCommand", _cluster_tokens(template))
    settings = synthesized.built.settings
    separator = words.index("&&")
    update, set_cluster = words[:separator], words[separator + 1 :]
    assert update == [
        "aws", "eks", "update-kubeconfig", "--name", settings.cluster_name,
        "--region", settings.region,
    ]  # fmt: skip
    # update-kubeconfig names the kubeconfig cluster entry after the cluster's ARN.
    assert set_cluster[:4] == ["kubectl", "config", "set-cluster", _cluster_tokens(template)(
        {"Fn::GetAtt": [_cluster_id(synthesized), "Arn"]}
    )]  # fmt: skip
    options = _options(set_cluster)
    assert options["--server"] == f"https://localhost:{API_LOCAL_PORT}"
    assert options["--tls-server-name"] == EXAMPLE_API_HOST
    assert "--insecure-skip-tls-verify" not in set_cluster


def _cluster_id(synthesized: Synthesized) -> str:
    (logical_id,) = synthesized.resources("cluster", "AWS::EKS::Cluster")
    return logical_id


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_the_endpoint_tunnel_reaches_the_load_balancers_listener(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    synthesized = synthesize(configuration)
    template = synthesized.templates["serving"]
    (listener,) = synthesized.resources("serving", "AWS::ElasticLoadBalancingV2::Listener").values()
    (cluster,) = synthesized.resources("cluster", "AWS::EKS::Cluster").values()
    words = _command(template, "EndpointTunnelCommand", _serving_tokens(template))
    port = listener["Properties"]["Port"]
    _check_port_forward(
        words, cluster["Properties"]["Name"], EXAMPLE_NLB_HOST, port, ENDPOINT_LOCAL_PORT
    )
    assert port == synthesized.built.settings.serving.endpoint.port


def test_the_endpoint_tunnel_is_open_to_the_nodes(default_app: Synthesized) -> None:
    """A node forwards the session from its own VPC address: the internal load balancer admits
    the VPC CIDR by default."""
    (group,) = [
        g
        for g in default_app.resources("serving", "AWS::EC2::SecurityGroup").values()
        if any(
            rule.get("FromPort") == default_app.built.settings.serving.endpoint.port
            for rule in g["Properties"].get("SecurityGroupIngress", [])
        )
    ]
    sources = {rule.get("CidrIp") for rule in group["Properties"]["SecurityGroupIngress"]}
    assert str(default_app.built.settings.network.vpc_cidr) in sources


OUTPUT_QUERY = re.compile(
    r"--stack-name (\S+) --query \"Stacks\[0\]\.Outputs\[\?OutputKey=='(\w+)'\]"
)


def _recipe() -> str:
    readme = (PROJECT_ROOT / "README.md").read_text()
    return readme.split("## Reaching what you deployed", 1)[1].split("\n## ", 1)[0]


def test_the_readme_recipe_names_only_outputs_the_stacks_have(default_app: Synthesized) -> None:
    recipe = _recipe()
    named = OUTPUT_QUERY.findall(recipe)
    assert len(named) >= 3
    settings = default_app.built.settings
    by_stack = {settings.stack_name(role): role for role in default_app.templates}
    for stack_name, output in named:
        stack = stack_name.replace("$PREFIX", settings.prefix)
        assert stack in by_stack, stack
        assert output in default_app.templates[by_stack[stack]]["Outputs"], output
