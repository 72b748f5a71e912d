"""Commands that reach the private API server and the model API from a laptop, through a node.

Nothing here is public by default: the EKS endpoint is private and the model API a private API
(or an internal load balancer). Session Manager forwards a local port through a node of the
cluster: every node runs the SSM agent (node role: the agent's Session Manager actions only;
VPC endpoints ssm and ssmmessages), holds the cluster security group that the control plane
admits, and sits in the VPC the model API's endpoint admits. Each tunnel is one of the stack's
own Session documents with a fixed destination (constructs/common/session_tunnel.py says why
AWS-StartPortForwardingSessionToRemoteHost is not offered). Nodes of EKS managed node groups
carry the tag ``eks:cluster-name`` (EKS user guide, "Managed node groups"), so the command finds
one at run time: nothing of a node's identity is baked into a template.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Fn

from app_config import Settings
from app_config.derived_names import API_TUNNEL, ENDPOINT_TUNNEL, tunnel_document_name
from constructs.common.session_tunnel import NODE_TAG
from constructs.serving.serving_endpoint import ServingEndpoint

API_LOCAL_PORT = 8443
ENDPOINT_LOCAL_PORT = 8000


def api_tunnel_document(settings: Settings) -> str:
    return tunnel_document_name(settings.prefix, API_TUNNEL)


def endpoint_tunnel_document(settings: Settings) -> str:
    return tunnel_document_name(settings.prefix, ENDPOINT_TUNNEL)


def any_running_node(cluster_name: str, region: str) -> str:
    """A shell expression that prints the instance id of one running node of the cluster."""
    return (
        f"$(aws ec2 describe-instances --region {region} --filters "
        f"Name=tag:{NODE_TAG},Values={cluster_name} Name=instance-state-name,Values=running "
        "--query 'Reservations[].Instances[].InstanceId | [0]' --output text)"
    )


def port_forward_command(cluster_name: str, region: str, document: str, local_port: int) -> str:
    """``aws ssm start-session`` forwarding ``localhost:local_port`` to where ``document``
    (one of the stack's fixed-destination Session documents) points."""
    node = any_running_node(cluster_name, region)
    return (
        f'aws ssm start-session --region {region} --target "{node}" '
        f"--document-name {document} --parameters localPortNumber={local_port}"
    )


def host_of(url: str) -> str:
    """The host of an https://host URL token (the EKS endpoint): CloudFormation, not Python."""
    return Fn.select(2, Fn.split("/", url))


@dataclass(frozen=True)
class EndpointTunnel:
    """Where the endpoint tunnel forwards to, and what the caller must know to use it."""

    host: str  # a CloudFormation token
    port: int
    description: str


# What admits a node when the operator named the clients: the node's address is in a private
# subnet and every node carries the cluster security group (EKS attaches it to managed nodes).
_NODE_ADMITTED_ONLY_IF = (
    "admits only serving.endpoint.client_security_group_ids and source_cidrs: this tunnel "
    "works only if they name the cluster security group (every node carries it) or a range "
    "holding the nodes' private subnets; else run the client on an admitted host."
)


def endpoint_tunnel(settings: Settings, endpoint: ServingEndpoint) -> EndpointTunnel | None:
    """The model API's tunnel target for this configuration, or None where none is needed.

    iam + internal: the private API's execute-api VPC endpoint on 443. A private API with private
    DNS off answers at ``{api-id}-{vpce-id}.execute-api.{region}.amazonaws.com`` (API Gateway
    developer guide, "Invoke a private API", Route 53 alias): TLS and API Gateway's routing use
    that name, so curl keeps it in the URL and only connects to the tunnel (--connect-to).
    none + internal: the load balancer's listener. Internet-facing (either authentication): no
    tunnel; the clients in source_cidrs reach the regional API or the public load balancer
    directly, and a node would reach them from a NAT gateway's address, which they do not admit.
    The cluster's security group is never added to what admits the model API: every node and
    every pod on the node network carries it, so it would open the network path to every
    workload of the cluster, which naming client groups was meant to narrow."""
    config = settings.serving.endpoint
    if config.scheme == "internet-facing":
        return None
    local = f"localhost:{ENDPOINT_LOCAL_PORT}"
    named = bool(config.client_security_group_ids or config.source_cidrs)
    vpc_endpoint = endpoint.api.vpc_endpoint if endpoint.api else None  # internal: private API
    if vpc_endpoint:
        admission = (
            f"The endpoint {_NODE_ADMITTED_ONLY_IF}"
            if named
            else "The endpoint admits the VPC range, which holds the node's address."
        )
        return EndpointTunnel(
            host=first_dns_name(vpc_endpoint.vpc_endpoint_dns_entries),
            port=443,
            description=f"Forwards {local} to the model API's execute-api VPC endpoint through a "
            f"node (Session Manager); then curl --connect-to <EndpointUrl host>:443:{local} "
            "--aws-sigv4 ... <EndpointUrl>/v1/models (the API's own name, for TLS and routing). "
            + admission,
        )
    return EndpointTunnel(
        host=endpoint.load_balancer.load_balancer_dns_name,
        port=config.port,
        description=f"Forwards {local} to the load balancer's listener through a node (Session "
        f"Manager); then {_local_url(config.port)}/v1/models. The load balancer "
        + _NODE_ADMITTED_ONLY_IF,
    )


def first_dns_name(dns_entries: list[str]) -> str:
    """The DNS name of an interface endpoint's first DnsEntries item ("zone-id:dns-name"): the
    endpoint's regional name, which resolves to its addresses in every zone."""
    return Fn.select(1, Fn.split(":", Fn.select(0, dns_entries)))


def _local_url(port: int) -> str:
    """With TLS the certificate names your domain, not localhost: curl needs --connect-to."""
    if port == 443:
        local = f"localhost:{ENDPOINT_LOCAL_PORT}"
        return f"curl --connect-to <your domain>:443:{local} https://<your domain>"
    return f"curl http://localhost:{ENDPOINT_LOCAL_PORT}"
