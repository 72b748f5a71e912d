"""Each rule of the Serving nag pack fires on a deliberately bad construct and passes a good one."""

from __future__ import annotations

import functools
from collections.abc import Callable

import aws_cdk as cdk
import jsii
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks, aws_eks_v2
from cdk_nag import NagRuleCompliance

from constructs import Construct
from constructs.gpu_nodes.efa_security_group import EfaSecurityGroup
from nag.serving_checks import (
    EFA_SECURITY_GROUP_METADATA,
    RULES,
    ServingChecks,
    launch_template_requires_imdsv2,
)

ALL_LOGS = ["api", "audit", "authenticator", "controllerManager", "scheduler"]


def _violations(build: Callable[[cdk.Stack], None]) -> set[str]:
    stack = cdk.Stack(cdk.App(), "RuleUnderTest")
    build(stack)
    report = ServingChecks().validate_scope(stack)
    return {violation.rule_name for violation in report.violations}


def _eks_cluster(
    cluster_class: type,
    *,
    public: bool = False,
    cidrs: list[str] | None = None,
    logs: list[str] = ALL_LOGS,
    encrypted: bool = True,
) -> Callable[[Construct], None]:
    def build(stack: Construct) -> None:
        props = cluster_class
        cluster_class(
            stack,
            "Cluster",
            role_arn="arn:aws:iam::123456789012:role/eks",
            resources_vpc_config=props.ResourcesVpcConfigProperty(
                subnet_ids=["subnet-1", "subnet-2"],
                endpoint_public_access=public,
                endpoint_private_access=True,
                public_access_cidrs=cidrs,
            ),
            logging=props.LoggingProperty(
                cluster_logging=props.ClusterLoggingProperty(
                    enabled_types=[props.LoggingTypeConfigProperty(type=t) for t in logs]
                )
            ),
            encryption_config=[
                props.EncryptionConfigProperty(
                    resources=["secrets"], provider=props.ProviderProperty(key_arn="arn:key")
                )
            ]
            if encrypted
            else None,
        )

    return build


# The same AWS::EKS::Cluster is generated as two L1 classes; rules must see both.
CLUSTER_CLASSES = [aws_eks.CfnCluster, aws_eks_v2.CfnCluster]


@pytest.mark.parametrize("cluster_class", CLUSTER_CLASSES)
def test_a_compliant_cluster_passes(cluster_class: type) -> None:
    assert _violations(_eks_cluster(cluster_class)) == set()
    assert _violations(_eks_cluster(cluster_class, public=True, cidrs=["203.0.113.0/24"])) == set()


@pytest.mark.parametrize("cluster_class", CLUSTER_CLASSES)
@pytest.mark.parametrize("cidrs", [None, ["0.0.0.0/0"], ["203.0.113.0/24", "0.0.0.0/0"]])
def test_public_endpoint_without_cidr_restriction_fires(
    cluster_class: type, cidrs: list[str]
) -> None:
    violations = _violations(_eks_cluster(cluster_class, public=True, cidrs=cidrs))
    assert violations == {"Serving-EKSPublicEndpointRestricted"}


@pytest.mark.parametrize("cluster_class", CLUSTER_CLASSES)
def test_missing_control_plane_log_types_fire(cluster_class: type) -> None:
    violations = _violations(_eks_cluster(cluster_class, logs=["api", "audit"]))
    assert violations == {"Serving-EKSControlPlaneLogs"}


@pytest.mark.parametrize("cluster_class", CLUSTER_CLASSES)
def test_secrets_without_envelope_encryption_fire(cluster_class: type) -> None:
    violations = _violations(_eks_cluster(cluster_class, encrypted=False))
    assert violations == {"Serving-EKSSecretsEncryption"}


def test_launch_template_without_imdsv2_fires() -> None:
    def build(stack: Construct) -> None:
        ec2.LaunchTemplate(stack, "Optional")  # the L2 leaves IMDSv1 on unless asked
        ec2.CfnLaunchTemplate(
            stack,
            "ExplicitlyOptional",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_tokens="optional"
                )
            ),
        )
        ec2.CfnLaunchTemplate(  # no metadata options: EC2's default allows IMDSv1
            stack,
            "NoOptions",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                instance_type="m7i.large"
            ),
        )

    report = ServingChecks().validate_scope(_stack_with(build))
    (violation,) = report.violations
    assert violation.rule_name == "Serving-LaunchTemplateIMDSv2"
    assert len(violation.violating_resources) == 3


def test_launch_template_requiring_imdsv2_passes() -> None:
    """The L2 hands its data over as a token, the L1 as a struct: the rule reads both."""

    def build(stack: Construct) -> None:
        ec2.LaunchTemplate(stack, "Lt", require_imdsv2=True)
        ec2.CfnLaunchTemplate(
            stack,
            "Required",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_tokens="required"
                )
            ),
        )

    assert _violations(build) == set()


def _gpu_launch_template(
    stack: Construct, construct_id: str, http_tokens: str, cards: int
) -> ec2.CfnLaunchTemplate:
    """Shaped like a GPU node's: one EFA interface per network card."""
    lt = ec2.CfnLaunchTemplate
    return lt(
        stack,
        construct_id,
        launch_template_data=lt.LaunchTemplateDataProperty(
            metadata_options=lt.MetadataOptionsProperty(http_tokens=http_tokens),
            network_interfaces=[
                lt.NetworkInterfaceProperty(
                    device_index=0 if card == 0 else 1,
                    network_card_index=card,
                    interface_type="efa",
                )
                for card in range(cards)
            ],
        ),
    )


def _kernel_round_trips(
    call: Callable[[], object], monkeypatch: pytest.MonkeyPatch
) -> tuple[object, int]:
    """What ``call`` returns, and how many requests it sent to jsii's Node.js kernel."""
    provider = jsii.kernel.provider
    sent = []
    for method in ("get", "set", "sget", "invoke", "sinvoke", "create"):
        original = getattr(provider, method)

        def counted(request: object, original: Callable = original) -> object:
            sent.append(request)
            return original(request)

        monkeypatch.setattr(provider, method, counted)
    result = call()
    monkeypatch.undo()
    return result, len(sent)


@pytest.mark.parametrize(
    ("http_tokens", "compliance"),
    [("required", NagRuleCompliance.COMPLIANT), ("optional", NagRuleCompliance.NON_COMPLIANT)],
)
def test_the_imdsv2_rule_reads_as_much_of_a_32_card_template_as_of_a_1_card_one(
    http_tokens: str, compliance: NagRuleCompliance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jsii copies a struct into Python one round trip per property, nested ones included: the
    whole data of a 32-card template was about 800 round trips, half of a synth's. The rule
    copies only the metadata options, so the interfaces cost it nothing."""
    stack = cdk.Stack(cdk.App(), "RuleUnderTest")
    round_trips = []
    for cards in (1, 32):
        template = _gpu_launch_template(stack, f"Cards{cards}", http_tokens, cards)
        verdict, sent = _kernel_round_trips(
            functools.partial(launch_template_requires_imdsv2, template), monkeypatch
        )
        assert verdict == compliance
        round_trips.append(sent)
    assert round_trips[0] == round_trips[1]


def _vpc(stack: Construct) -> ec2.IVpc:
    return ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["az"])


def _efa_group(stack: Construct) -> ec2.ISecurityGroup:
    """Our EfaSecurityGroup, as an L2 handle so tests can widen it the way a user might."""
    efa = EfaSecurityGroup(stack, "Efa", vpc=_vpc(stack), description="EFA")
    return ec2.SecurityGroup.from_security_group_id(
        stack, "EfaHandle", efa.security_group_id, allow_all_outbound=False
    )


def test_our_efa_security_group_passes() -> None:
    assert _violations(_efa_group) == set()


def test_l2_group_with_self_rules_still_allows_all_egress_and_fires() -> None:
    """The trap EfaSecurityGroup exists for: whichever allow_all_outbound the L2 gets, a
    self-only group ends up with EC2's default egress to 0.0.0.0/0."""
    for allow_all_outbound in (True, False):

        def build(stack: Construct, allow_all_outbound: bool = allow_all_outbound) -> None:
            group = ec2.SecurityGroup(
                stack, "Efa", vpc=_vpc(stack), allow_all_outbound=allow_all_outbound
            )
            group.node.default_child.add_metadata(EFA_SECURITY_GROUP_METADATA, True)
            group.add_ingress_rule(group, ec2.Port.all_traffic())
            group.add_egress_rule(group, ec2.Port.all_traffic())

        assert _violations(build) == {"Serving-EFASecurityGroupSelfOnly"}


@pytest.mark.parametrize(
    "widen",
    [
        lambda g: g.add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.all_traffic()),
        lambda g: g.add_ingress_rule(ec2.Peer.ipv4("10.0.0.0/16"), ec2.Port.tcp(22)),
        lambda g: g.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.HTTPS),
        lambda g: g.add_ingress_rule(
            ec2.SecurityGroup.from_security_group_id(g.stack, "Other", "sg-0123456789abcdef0"),
            ec2.Port.all_traffic(),
        ),
    ],
    ids=[
        "ingress-from-anywhere",
        "ingress-from-cidr",
        "egress-to-anywhere",
        "ingress-from-other-group",
    ],
)
def test_efa_group_admitting_anything_but_itself_fires(widen: Callable) -> None:
    assert _violations(lambda stack: widen(_efa_group(stack))) == {
        "Serving-EFASecurityGroupSelfOnly"
    }


def test_unmarked_groups_are_not_judged_by_the_efa_rule() -> None:
    def build(stack: Construct) -> None:
        ec2.SecurityGroup(stack, "Web", vpc=_vpc(stack)).add_ingress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.HTTPS
        )

    assert _violations(build) == set()


def test_every_rule_is_registered_once() -> None:
    suffixes = [rule.suffix for rule in RULES]
    assert len(suffixes) == len(set(suffixes)) == 5


def _stack_with(build: Callable[[cdk.Stack], None]) -> cdk.Stack:
    stack = cdk.Stack(cdk.App(), "RuleUnderTest")
    build(stack)
    return stack
