"""Commands that reach the private API server and load balancer from a laptop, through a node.

Nothing here is public by default: the EKS endpoint is private and the load balancer internal.
Session Manager's port forwarding to a remote host (the AWS-managed SSM document
AWS-StartPortForwardingSessionToRemoteHost, parameters ``host``, ``portNumber`` and
``localPortNumber``; Systems Manager user guide, "Port forwarding to a remote host") carries a
local port to any address the node can reach. Every node can: it runs the SSM agent (node role
AmazonSSMManagedInstanceCore, VPC endpoints ssm, ssmmessages and ec2messages), holds the cluster
security group that the control plane admits, and sits in the VPC the load balancer admits.
Nodes of EKS managed node groups carry the tag ``eks:cluster-name`` (EKS user guide, "Managed
node groups"), so the command finds one at run time: nothing of a node's identity is baked into
a template.
"""

from __future__ import annotations

from aws_cdk import Fn

PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"
NODE_TAG = "eks:cluster-name"
API_LOCAL_PORT = 8443
ENDPOINT_LOCAL_PORT = 8000


def any_running_node(cluster_name: str, region: str) -> str:
    """A shell expression that prints the instance id of one running node of the cluster."""
    return (
        f"$(aws ec2 describe-instances --region {region} --filters "
        f"Name=tag:{NODE_TAG},Values={cluster_name} Name=instance-state-name,Values=running "
        "--query 'Reservations[].Instances[].InstanceId | [0]' --output text)"
    )


def port_forward_command(
    cluster_name: str, region: str, host: str, port: int | str, local_port: int
) -> str:
    """``aws ssm start-session`` forwarding ``localhost:local_port`` to ``host:port``."""
    node = any_running_node(cluster_name, region)
    return (
        f'aws ssm start-session --region {region} --target "{node}" '
        f"--document-name {PORT_FORWARD_DOCUMENT} "
        f"--parameters host={host},portNumber={port},localPortNumber={local_port}"
    )


def host_of(url: str) -> str:
    """The host of an https://host URL token (the EKS endpoint): CloudFormation, not Python."""
    return Fn.select(2, Fn.split("/", url))
