"""Reaching the private API server and the model API: the stack outputs the README's recipe runs
are real commands, aimed at resources the same templates create, and the model API's tunnel goes
where each serving.endpoint mode puts the API, through a node that the target really admits.

Commands are checked against AWS's own service models (botocore) for the operations and filters
they name, and their tokens against the template's resources; the README recipe may only name
outputs that the stacks have."""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Callable
from typing import Any

import botocore.session
import pytest

from constructs.common.session_tunnel import NODE_TAG
from stacks.tunnel import API_LOCAL_PORT, ENDPOINT_LOCAL_PORT
from tests.configurations import CONFIGURATIONS, PROJECT_ROOT
from tests.conftest import Synthesized

# The stacks' tunnel documents declare one parameter (constructs/common/session_tunnel.py): the
# document, not the SSM API, defines them; host and port are fixed in the document.
PORT_FORWARD_PARAMETERS = {"localPortNumber"}
EXAMPLE_API_HOST = "0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com"
EXAMPLE_NLB_HOST = "pd-llm-endpoint-0123456789abcdef.elb.us-west-2.amazonaws.com"
EXAMPLE_VPCE_HOST = "vpce-0123456789abcdef0-abcdefgh.execute-api.us-west-2.vpce.amazonaws.com"
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
        if isinstance(token, str):  # an existing cluster's host, as configured
            return token
        if token == {"Ref": "AWS::AccountId"}:  # in an existing cluster's ARN
            return "123456789012"
        if "Fn::Select" in token:  # the host of the cluster's endpoint URL
            index, split = token["Fn::Select"]
            separator, source = split["Fn::Split"]
            if isinstance(source, str):  # an existing cluster's, as configured
                return source.split(separator)[index]
            logical_id, attribute = source["Fn::GetAtt"]
            assert (index, separator, attribute) == (2, "/", "Endpoint")
            assert _resource_type(template, logical_id) == "AWS::EKS::Cluster"
            return f"https://{EXAMPLE_API_HOST}".split(separator)[index]
        logical_id, attribute = token["Fn::GetAtt"]
        assert (_resource_type(template, logical_id), attribute) == ("AWS::EKS::Cluster", "Arn")
        return "arn:aws:eks:us-west-2:123456789012:cluster/pd-llm"

    return resolve


def _serving_tokens(template: dict[str, Any]) -> Callable[[Any], str]:
    """The endpoint tunnel's host: the load balancer's DNS name, or the first DNS name of the
    model API's execute-api interface endpoint (DnsEntries items are "zone-id:dns-name")."""

    def resolve(token: Any) -> str:
        if "Fn::Select" in token:
            index, outer = token["Fn::Select"]
            separator, item = outer["Fn::Split"]
            item_index, entries = item["Fn::Select"]
            logical_id, attribute = entries["Fn::GetAtt"]
            assert (index, separator, item_index, attribute) == (1, ":", 0, "DnsEntries")
            endpoint = template["Resources"][logical_id]
            assert endpoint["Type"] == "AWS::EC2::VPCEndpoint"
            assert endpoint["Properties"]["ServiceName"].endswith(".execute-api")
            assert endpoint["Properties"]["VpcEndpointType"] == "Interface"
            return f"Z1HUB23UULQXV:{EXAMPLE_VPCE_HOST}".split(separator)[index]
        logical_id, attribute = token["Fn::GetAtt"]
        assert attribute == "DNSName"
        assert _resource_type(template, logical_id) == "AWS::ElasticLoadBalancingV2::LoadBalancer"
        return EXAMPLE_NLB_HOST

    return resolve


def _options(words: list[str]) -> dict[str, str]:
    return {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}


def _check_port_forward(
    words: list[str],
    cluster_name: str,
    host: str,
    port: int,
    local: int,
    template: dict[str, Any],
    tokens: Callable[[Any], str],
) -> None:
    """The command starts a session with a document of the same template, whose fixed
    destination is ``host:port``, on local port ``local``."""
    assert words[:3] == ["aws", "ssm", "start-session"]
    options = _options(words)
    start_session = BOTOCORE.get_service_model("ssm").operation_model("StartSession")
    for option in ("--target", "--document-name", "--parameters"):
        member = "".join(part.capitalize() for part in option[2:].split("-"))
        assert member in start_session.input_shape.members
    (content,) = [
        resource["Properties"]["Content"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::SSM::Document"
        and resource["Properties"]["Name"] == options["--document-name"]
    ]
    assert set(content["parameters"]) == PORT_FORWARD_PARAMETERS
    parameters = dict(item.split("=", 1) for item in options["--parameters"].split(","))
    assert parameters == {"localPortNumber": str(local)}
    properties = content["properties"]
    assert (tokens(properties["host"]), properties["portNumber"]) == (host, str(port))
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
    words = _command(template, "ApiTunnelCommand", _cluster_tokens(template))
    _check_port_forward(
        words,
        _cluster_name(synthesized),
        EXAMPLE_API_HOST,
        443,
        API_LOCAL_PORT,
        template,
        _cluster_tokens(template),
    )


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_kubectl_goes_through_the_tunnel_and_still_checks_the_servers_name(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    synthesized = synthesize(configuration)
    template = synthesized.templates["cluster"]
    words = _command(template, "TunnelKubeconfigCommand", _cluster_tokens(template))
    settings = synthesized.settings
    separator = words.index("&&")
    update, set_cluster = words[:separator], words[separator + 1 :]
    assert update == [
        "aws", "eks", "update-kubeconfig", "--name", settings.cluster_name,
        "--region", settings.region,
    ]  # fmt: skip
    # update-kubeconfig names the kubeconfig cluster entry after the cluster's ARN.
    if settings.cluster.existing is None:
        arn = _cluster_tokens(template)({"Fn::GetAtt": [_cluster_id(synthesized), "Arn"]})
    else:  # imported: the ARN of the name, in the deploying account
        arn = f"arn:aws:eks:{settings.region}:123456789012:cluster/{settings.cluster_name}"
    assert set_cluster[:4] == ["kubectl", "config", "set-cluster", arn]
    options = _options(set_cluster)
    assert options["--server"] == f"https://localhost:{API_LOCAL_PORT}"
    assert options["--tls-server-name"] == EXAMPLE_API_HOST
    assert "--insecure-skip-tls-verify" not in set_cluster


def _cluster_name(synthesized: Synthesized) -> str:
    """The created cluster's Name property, or an existing cluster's configured name (the
    templates hold no AWS::EKS::Cluster of it)."""
    if synthesized.settings.cluster.existing is not None:
        assert not synthesized.resources("cluster", "AWS::EKS::Cluster")
        return synthesized.settings.cluster_name
    (cluster,) = synthesized.resources("cluster", "AWS::EKS::Cluster").values()
    return cluster["Properties"]["Name"]


def _cluster_id(synthesized: Synthesized) -> str:
    (logical_id,) = synthesized.resources("cluster", "AWS::EKS::Cluster")
    return logical_id


# The endpoint modes no named configuration has, as variants of the default (one synth each).
ENDPOINT_VARIANTS: dict[str, dict[str, str]] = {
    "none-internal": {
        "serving.endpoint.authentication": "none",
        "serving.endpoint.client_security_group_ids": '["sg-0123456789abcdef0"]',
    },
    "iam-internet-facing": {
        "serving.endpoint.scheme": "internet-facing",
        "serving.endpoint.source_cidrs": '["198.51.100.0/24"]',
    },
}
ENDPOINT_CASES = [(name, None) for name in CONFIGURATIONS] + [
    ("default", overrides) for overrides in ENDPOINT_VARIANTS.values()
]
ENDPOINT_CASE_IDS = list(CONFIGURATIONS) + list(ENDPOINT_VARIANTS)


def _node_ranges(synthesized: Synthesized) -> list[ipaddress.IPv4Network]:
    """The private subnets, where every node (system and GPU) has its address; in an existing
    VPC, whose subnets' ranges synth does not know, the VPC's blocks that hold them."""
    existing = synthesized.settings.network.existing_vpc
    if existing is not None:
        return list(existing.cidr_blocks)
    ranges = []
    for subnet in synthesized.resources("network", "AWS::EC2::Subnet").values():
        tags = {tag["Key"]: tag["Value"] for tag in subnet["Properties"]["Tags"]}
        if tags["aws-cdk:subnet-type"] == "Private":
            ranges.append(ipaddress.ip_network(subnet["Properties"]["CidrBlock"]))
    assert ranges
    return ranges


def _ingress(template: dict[str, Any], group_refs: list[Any]) -> list[dict[str, Any]]:
    """Every ingress rule of the groups (inline, or AWS::EC2::SecurityGroupIngress resources)."""
    ids = [ref["Fn::GetAtt"][0] for ref in group_refs]
    rules = [
        rule
        for logical_id in ids
        for rule in template["Resources"][logical_id]["Properties"].get("SecurityGroupIngress", [])
    ]
    rules += [
        resource["Properties"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::EC2::SecurityGroupIngress"
        and resource["Properties"]["GroupId"] in group_refs
    ]
    return rules


def _admits_every_node(
    rules: list[dict[str, Any]], port: int, nodes: list[ipaddress.IPv4Network]
) -> bool:
    """A rule on the port whose CIDR holds every node's subnet. A rule naming a group admits
    the nodes only if it is the cluster security group, which no serving template names."""
    for rule in rules:
        if rule["IpProtocol"] not in ("tcp", "-1"):
            continue
        if rule["IpProtocol"] == "tcp" and not rule["FromPort"] <= port <= rule["ToPort"]:
            continue
        if "SourceSecurityGroupId" in rule:
            assert isinstance(rule["SourceSecurityGroupId"], str), rule  # a named client group
        elif all(net.subnet_of(ipaddress.ip_network(rule["CidrIp"])) for net in nodes):
            return True
    return False


@pytest.mark.parametrize(("configuration", "overrides"), ENDPOINT_CASES, ids=ENDPOINT_CASE_IDS)
def test_the_endpoint_tunnel_goes_where_the_model_api_is_and_says_whether_a_node_gets_in(
    synthesize: Callable[..., Synthesized], configuration: str, overrides: dict[str, str] | None
) -> None:
    synthesized = synthesize(configuration, overrides)
    template = synthesized.templates["serving"]
    endpoint = synthesized.settings.serving.endpoint
    if endpoint.scheme == "internet-facing":
        # A regional API or a public load balancer: source_cidrs reach it directly; a node
        # would come from a NAT gateway's address.
        assert "EndpointTunnelCommand" not in template["Outputs"]
        return
    output = template["Outputs"]["EndpointTunnelCommand"]
    cluster_name = _cluster_name(synthesized)
    words = _command(template, "EndpointTunnelCommand", _serving_tokens(template))
    description = output["Description"]
    assert isinstance(description, str)  # CloudFormation takes no tokens in a description
    local = f"localhost:{ENDPOINT_LOCAL_PORT}"
    if endpoint.authentication == "iam":
        (vpce_id,) = synthesized.resources("serving", "AWS::EC2::VPCEndpoint")
        vpce = template["Resources"][vpce_id]["Properties"]
        host, port, groups = EXAMPLE_VPCE_HOST, 443, vpce["SecurityGroupIds"]
        assert vpce["PrivateDnsEnabled"] is False
        # The caller keeps the API's own name (EndpointUrl) and connects to the tunnel: that
        # name is the API's alias on this very endpoint.
        url_parts = template["Outputs"]["EndpointUrl"]["Value"]["Fn::Join"][1]
        assert {"Ref": vpce_id} in url_parts
        assert f"--connect-to <EndpointUrl host>:443:{local}" in description
        assert "--aws-sigv4" in description
    else:
        (balancer_id,) = synthesized.resources(
            "serving", "AWS::ElasticLoadBalancingV2::LoadBalancer"
        )
        (listener,) = synthesized.resources(
            "serving", "AWS::ElasticLoadBalancingV2::Listener"
        ).values()
        port = listener["Properties"]["Port"]
        assert port == endpoint.port
        host = EXAMPLE_NLB_HOST
        groups = template["Resources"][balancer_id]["Properties"]["SecurityGroups"]
        assert local in description
    _check_port_forward(
        words,
        cluster_name,
        host,
        port,
        ENDPOINT_LOCAL_PORT,
        template,
        _serving_tokens(template),
    )
    nodes = _node_ranges(synthesized)
    admitted = _admits_every_node(_ingress(template, groups), port, nodes)
    if not (endpoint.client_security_group_ids or endpoint.source_cidrs):  # iam only
        assert admitted, "the endpoint admits the VPC range when no client is named"
        assert "admits the VPC range" in description
    else:  # only what was named, never the cluster's group: a node gets in by a range only
        assert admitted == any(
            all(node.subnet_of(ipaddress.ip_network(str(cidr))) for node in nodes)
            for cidr in endpoint.source_cidrs
        )
        assert "works only if they name the cluster security group" in description


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
    settings = default_app.settings
    by_stack = {settings.stack_name(role): role for role in default_app.templates}
    for stack_name, output in named:
        stack = stack_name.replace("$PREFIX", settings.prefix)
        assert stack in by_stack, stack
        assert output in default_app.templates[by_stack[stack]]["Outputs"], output
    # curl keeps the API's name and connects to the tunnel's local port.
    connect_to = re.findall(r"--connect-to \S*:443:localhost:(\d+)", recipe)
    assert connect_to
    assert set(connect_to) == {str(ENDPOINT_LOCAL_PORT)}
