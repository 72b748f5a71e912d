"""Session Manager tunnels that can reach one destination each, and the policy that opens them.

Why not AWS's own document. AWS-StartPortForwardingSessionToRemoteHost forwards to whatever
``host`` and ``portNumber`` the caller names, and the connection leaves from the node the
session runs on. The VPC CNI's network policy agent admits every connection from a pod's own
node (aws-network-policy-agent v1.4.1, ``pkg/fwruleprocessor/fw_rule_processor.go``,
ComputeMapEntriesFromEndpointRules: "Traffic from the local node should always be allowed";
PRs #65 and #636), so a tunnel through a node reaches every port of every pod on it (Serve's
8000, unsigned; the NIXL side channels) and the node's instance metadata (its role). And
``ssm:StartSession`` without the ``ssm:SessionDocumentAccessCheck`` condition also opens a shell
on the node (SSM-SessionManagerRunShell is used, unchecked, when no document is named; Systems
Manager user guide, "Enforce a session document permission check for the AWS CLI").

What this does instead. Each tunnel is a Session document of the stack's own
(``sessionType: Port``, ``LocalPortForwarding``) whose ``host`` and ``portNumber`` are fixed in
its ``properties``; only ``localPortNumber`` is a parameter (Systems Manager user guide,
"Session document schema"; a caller cannot pass a parameter the document does not declare).
The policy allows ``ssm:StartSession`` with those documents only, on this cluster's nodes only
(``ssm:resourceTag/eks:cluster-name``), under ``ssm:SessionDocumentAccessCheck``, so no
document-less (shell) session starts. Weighed against a bastion instance outside the cluster
security group: that adds an instance to patch and pay for, and its own security group would
have to be admitted by the API server and the VPC endpoint; the documents add nothing that runs,
and what they can reach is written in the template, where the tests read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm

from constructs import Construct
from constructs.common.nag_acknowledgments import account_arn, acknowledge

# The tag EKS puts on every instance of a managed node group (EKS user guide, "Managed node
# groups": eks:cluster-name and eks:nodegroup-name).
NODE_TAG = "eks:cluster-name"
# AWS-StartPortForwardingSessionToRemoteHost's own localPortNumber parameter (document
# content, version 1): any port, 0 letting the plugin pick one.
LOCAL_PORT_PARAMETER = {
    "type": "String",
    "description": "Port on your machine that the tunnel listens on (0: any free port)",
    "allowedPattern": "^([0-9]|[1-9][0-9]{1,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}"
    "|655[0-2][0-9]|6553[0-5])$",
    "default": "0",
}


def document_content(host: str, port: int, description: str) -> dict:
    """A port-forwarding Session document whose destination is not the caller's to choose."""
    return {
        "schemaVersion": "1.0",
        "description": description,
        "sessionType": "Port",
        "parameters": {"localPortNumber": LOCAL_PORT_PARAMETER},
        "properties": {
            "type": "LocalPortForwarding",
            "host": host,
            "portNumber": str(port),
            "localPortNumber": "{{ localPortNumber }}",
        },
    }


@dataclass(frozen=True)
class TunnelDestination:
    host: str  # may be a CloudFormation token (the API server's or an endpoint's DNS name)
    port: int
    description: str


class TunnelDocument(Construct):
    """One fixed-destination tunnel. Named, so that the README's command and the policy can
    name it; content changes make a new default version in place (``UpdateMethod:
    NewVersion``) instead of a replacement, which a named document could not survive. The name
    starts with ``Tunnel-``: Systems Manager reserves the prefixes aws, amazon and amzn
    (CreateDocument, ``Name``), which a stack prefix could begin with."""

    def __init__(self, scope: Construct, construct_id: str, *, name: str, to: TunnelDestination):
        super().__init__(scope, construct_id)
        self.name = name
        self.destination = to
        self.document = ssm.CfnDocument(
            self,
            "Document",
            name=name,
            document_type="Session",
            update_method="NewVersion",
            content=document_content(to.host, to.port, to.description),
        )
        self.arn = account_arn(Stack.of(self), "ssm", f"document/{name}").arn


class TunnelPolicy(Construct):
    """The customer managed policy an operator attaches to open these tunnels, and only them.

    Statements (Systems Manager user guide, "Sample IAM policies for Session Manager"): start a
    session on this cluster's nodes under the document access check; with these documents; end
    or resume only one's own sessions (the session's ``aws:ssmmessages:session-id`` tag is the
    caller's ``aws:userid``, the form the guide gives for roles and federated users); find a
    running node (``ec2:DescribeInstances`` has no resource-level permissions)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        documents: list[TunnelDocument],
        description: str,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        instances = account_arn(stack, "ec2", "instance/*")
        sessions = account_arn(stack, "ssm", "session/*")
        self.policy = iam.ManagedPolicy(
            self,
            "Policy",
            description=description,
            statements=[
                iam.PolicyStatement(
                    sid="StartSessionsOnThisClustersNodes",
                    actions=["ssm:StartSession"],
                    resources=[instances.arn],
                    conditions={
                        "StringEquals": {f"ssm:resourceTag/{NODE_TAG}": cluster_name},
                        "BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"},
                    },
                ),
                iam.PolicyStatement(
                    sid="WithTheFixedDestinationDocumentsOnly",
                    actions=["ssm:StartSession"],
                    resources=[document.arn for document in documents],
                    conditions={"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}},
                ),
                iam.PolicyStatement(
                    sid="EndOrResumeOwnSessions",
                    actions=["ssm:TerminateSession", "ssm:ResumeSession"],
                    resources=[sessions.arn],
                    conditions={
                        "StringLike": {
                            "ssm:resourceTag/aws:ssmmessages:session-id": "${aws:userid}"
                        }
                    },
                ),
                iam.PolicyStatement(
                    sid="FindARunningNode",
                    actions=["ec2:DescribeInstances"],
                    resources=["*"],
                ),
            ],
        )
        acknowledge(
            self.policy,
            instances.finding,
            "Sessions may start on any instance carrying this cluster's eks:cluster-name tag "
            "(the condition): nodes come and go, so their ids cannot be listed; and only with "
            "this stack's fixed-destination documents (the next statement).",
        )
        acknowledge(
            self.policy,
            sessions.finding,
            "Ending or resuming a session: only the caller's own (the condition on the "
            "session's aws:ssmmessages:session-id tag), as the Session Manager guide gives it.",
        )
        acknowledge(
            self.policy,
            "AwsSolutions-IAM5[Resource::*]",
            "ec2:DescribeInstances, to find a running node of the cluster by its tag: it has "
            "no resource-level permissions (Service Authorization Reference, Amazon EC2).",
        )
