"""The `Serving` rule pack: EKS and EFA rules that cdk-nag's packs miss.

cdk-nag's EKS1/EKS2 only recognise the old aws_eks classes and never fire on an aws_eks_v2
cluster; checkov's CloudFormation EKS checks are thin. These rules close the gap. Like cdk-nag's
own rules they read L1 properties, so values set through raw property overrides are not seen.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnResource, Stack, aws_eks, aws_eks_v2
from aws_cdk import aws_ec2 as ec2
from cdk_nag import NagPack, NagRuleCompliance

from nag.rule import AppliedRule, NagRule
from nag.struct_reads import StructValue, struct_property

COMPLIANT = NagRuleCompliance.COMPLIANT
NON_COMPLIANT = NagRuleCompliance.NON_COMPLIANT
NOT_APPLICABLE = NagRuleCompliance.NOT_APPLICABLE

# aws_eks and aws_eks_v2 each generate their own L1 class for AWS::EKS::Cluster.
EKS_CLUSTER_TYPES = (aws_eks.CfnCluster, aws_eks_v2.CfnCluster)

CONTROL_PLANE_LOG_TYPES = frozenset(
    {"api", "audit", "authenticator", "controllerManager", "scheduler"}
)

# Resource metadata that marks a security group as carrying EFA traffic only.
EFA_SECURITY_GROUP_METADATA = "llm-serving:efa-security-group"
# The rule aws-cdk-lib writes into a group that must allow no egress (allowAllOutbound: false):
# without any inline egress rule, EC2 would add allow-all egress to 0.0.0.0/0.
MATCH_NO_TRAFFIC = {
    "cidrIp": "255.255.255.255/32",
    "ipProtocol": "icmp",
    "fromPort": 252,
    "toPort": 86,
}


EFA_RULE_TYPES = (ec2.CfnSecurityGroup, ec2.CfnSecurityGroupIngress, ec2.CfnSecurityGroupEgress)


def _resolve(node: CfnResource, value: Any) -> Any:
    return Stack.of(node).resolve(value)


def public_endpoint_restricted(node: CfnResource) -> NagRuleCompliance:
    if not isinstance(node, EKS_CLUSTER_TYPES):
        return NOT_APPLICABLE
    vpc_config = _resolve(node, node.resources_vpc_config) or {}
    # AWS::EKS::Cluster defaults EndpointPublicAccess to true.
    if vpc_config.get("endpointPublicAccess", True) is False:
        return COMPLIANT
    cidrs = vpc_config.get("publicAccessCidrs") or ["0.0.0.0/0"]
    return NON_COMPLIANT if "0.0.0.0/0" in cidrs else COMPLIANT


def all_control_plane_logs(node: CfnResource) -> NagRuleCompliance:
    if not isinstance(node, EKS_CLUSTER_TYPES):
        return NOT_APPLICABLE
    logging = _resolve(node, node.logging) or {}
    enabled = {
        entry.get("type") for entry in logging.get("clusterLogging", {}).get("enabledTypes", [])
    }
    return COMPLIANT if enabled >= CONTROL_PLANE_LOG_TYPES else NON_COMPLIANT


def secrets_envelope_encrypted(node: CfnResource) -> NagRuleCompliance:
    if not isinstance(node, EKS_CLUSTER_TYPES):
        return NOT_APPLICABLE
    for config in _resolve(node, node.encryption_config) or []:
        if "secrets" in config.get("resources", []) and config.get("provider", {}).get("keyArn"):
            return COMPLIANT
    return NON_COMPLIANT


def launch_template_requires_imdsv2(node: CfnResource) -> NagRuleCompliance:
    if not isinstance(node, ec2.CfnLaunchTemplate):
        return NOT_APPLICABLE
    data = struct_property(
        node, "launchTemplateData", ec2.CfnLaunchTemplate.LaunchTemplateDataProperty
    )
    if isinstance(data, StructValue):
        # Only the metadata options leave JavaScript: the rest of the data (the network
        # interfaces, the user data with its multipart MIME) is most of a synth's jsii traffic.
        resolved = _resolve(node, data.member("metadataOptions")) or {}
    else:  # a token (the L2 LaunchTemplate hands its data over as one) or nothing
        resolved = (_resolve(node, data) or {}).get("metadataOptions") or {}
    return COMPLIANT if resolved.get("httpTokens") == "required" else NON_COMPLIANT


def efa_security_group_self_only(node: CfnResource) -> NagRuleCompliance:
    """An EFA group's only rules are all-traffic to and from itself (EFA user guide, 'Prepare an
    EFA-enabled security group')."""
    if isinstance(node, ec2.CfnSecurityGroup):
        if not _is_efa_group(node):
            return NOT_APPLICABLE
        ingress = _resolve(node, node.security_group_ingress) or []
        egress = _resolve(node, node.security_group_egress) or []
        # Inline rules cannot reference the group itself, so any inline rule admits others.
        egress_rules = [{k: v for k, v in rule.items() if k != "description"} for rule in egress]
        return COMPLIANT if not ingress and egress_rules == [MATCH_NO_TRAFFIC] else NON_COMPLIANT
    if isinstance(node, ec2.CfnSecurityGroupIngress):
        group, peer = node.group_id, node.source_security_group_id
        others = (node.cidr_ip, node.cidr_ipv6, node.source_prefix_list_id)
    elif isinstance(node, ec2.CfnSecurityGroupEgress):
        group, peer = node.group_id, node.destination_security_group_id
        others = (node.cidr_ip, node.cidr_ipv6, node.destination_prefix_list_id)
    else:
        return NOT_APPLICABLE
    target = _group_resource(node, group)
    if target is None or not _is_efa_group(target):
        return NOT_APPLICABLE
    same_group = _resolve(node, peer) == _resolve(node, group)
    return COMPLIANT if same_group and not any(others) else NON_COMPLIANT


def _is_efa_group(group: ec2.CfnSecurityGroup) -> bool:
    return bool(group.get_metadata(EFA_SECURITY_GROUP_METADATA))


def _group_resource(node: CfnResource, group_id: Any) -> ec2.CfnSecurityGroup | None:
    """The security group a rule attaches to, when it lives in the same stack."""
    reference = _resolve(node, group_id)
    if not isinstance(reference, dict) or "Fn::GetAtt" not in reference:
        return None
    logical_id = reference["Fn::GetAtt"][0]
    stack = Stack.of(node)
    for child in stack.node.find_all():
        if (
            isinstance(child, ec2.CfnSecurityGroup)
            and stack.resolve(child.logical_id) == logical_id
        ):
            return child
    return None


RULES: tuple[NagRule, ...] = (
    NagRule(
        "EKSPublicEndpointRestricted",
        "The EKS API endpoint is public without a CIDR allow-list.",
        "A public endpoint open to 0.0.0.0/0 exposes the Kubernetes API to the internet; keep it "
        "private or list the CIDRs that may reach it.",
        public_endpoint_restricted,
        EKS_CLUSTER_TYPES,
    ),
    NagRule(
        "EKSControlPlaneLogs",
        "The EKS cluster does not send all five control-plane log types to CloudWatch Logs.",
        "api, audit, authenticator, controllerManager and scheduler logs are needed to investigate "
        "access and scheduling incidents after the fact.",
        all_control_plane_logs,
        EKS_CLUSTER_TYPES,
    ),
    NagRule(
        "EKSSecretsEncryption",
        "Kubernetes secrets are not envelope-encrypted with a KMS key.",
        "Without an EncryptionConfig for 'secrets', secrets rest in etcd protected only by the "
        "default EBS encryption of the control plane.",
        secrets_envelope_encrypted,
        EKS_CLUSTER_TYPES,
    ),
    NagRule(
        "LaunchTemplateIMDSv2",
        "The launch template does not require IMDSv2.",
        "IMDSv1 answers unauthenticated GET requests, the classic SSRF path to node credentials.",
        launch_template_requires_imdsv2,
        (ec2.CfnLaunchTemplate,),
    ),
    NagRule(
        "EFASecurityGroupSelfOnly",
        "A security group meant for EFA admits traffic from or to something other than itself.",
        "EFA needs all traffic to and from members of its own group and nothing else; any other "
        "rule widens the RDMA fabric to peers that never need it.",
        efa_security_group_self_only,
        EFA_RULE_TYPES,
    ),
)


class ServingChecks(NagPack):
    """Registered next to AwsSolutions; acknowledged like any cdk-nag rule (``Serving-<Rule>``)."""

    PACK_NAME = "Serving"

    def __init__(self, scope: Any = None) -> None:
        super().__init__(scope, verbose=True)
        self._pack_name = self.PACK_NAME

    @property
    def name(self) -> str:
        return self.PACK_NAME

    def _check_resource(self, node: CfnResource) -> None:
        for rule in RULES:
            if rule.applies_to(node):
                self._apply_rule(AppliedRule(rule, node))
