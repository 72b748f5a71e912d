"""cdk-nag: AwsSolutions gates (as in `cdk synth`); NIST 800-53 rev 5 is a report with a floor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sqs as sqs
from cdk_nag import NIST80053R5Checks

from stacks.nag import register_nag_packs
from tests.configurations import CONFIGURATIONS
from tests.conftest import Synthesized

# NIST rules that this project does satisfy; the report test fails if one of them ever fires.
NIST_RULES_WE_MEET = {
    "NIST.800.53.R5-KMSBackingKeyRotationEnabled",
    "NIST.800.53.R5-VPCFlowLogsEnabled",
    "NIST.800.53.R5-VPCDefaultSecurityGroupClosed",
    "NIST.800.53.R5-CloudWatchLogGroupRetentionPeriod",
    "NIST.800.53.R5-EC2IMDSv2Enabled",
    "NIST.800.53.R5-EC2RestrictedSSH",
    "NIST.800.53.R5-IAMUserNoPolicies",
}


def _stacks(synthesized: Synthesized) -> list[cdk.Stack]:
    return synthesized.built.stacks.all()


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_no_rule_pack_failed_the_synth(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    """The packs run as validation plugins of `cdk synth`, which fails on an unacknowledged
    finding (the gate tests below show it); the report the CDK writes lists any plugin that
    found something, and none concluded failure."""
    reports = synthesize(configuration).validation_report()["pluginReports"]
    assert {report["conclusion"] for report in reports} <= {"success"}, reports


def _breaks_serving(stack: cdk.Stack) -> None:
    ec2.CfnLaunchTemplate(stack, "NoImdsV2", launch_template_data={})


def _breaks_aws_solutions(stack: cdk.Stack) -> None:
    sqs.CfnQueue(stack, "Unencrypted")


@pytest.mark.parametrize(
    ("pack", "breaks"),
    [("Serving", _breaks_serving), ("AwsSolutions", _breaks_aws_solutions)],
)
def test_each_rule_pack_gates_the_synth(tmp_path, pack: str, breaks) -> None:
    """A stack breaking one rule of the pack fails the synth of an app whose packs are
    registered as the app registers them."""
    app = cdk.App(outdir=str(tmp_path))
    breaks(cdk.Stack(app, "Breaks"))
    register_nag_packs(app)
    with pytest.raises(RuntimeError) as raised:
        app.synth()
    assert f"{pack}-" in str(raised.value)


def test_every_acknowledgment_names_an_exact_finding_and_a_specific_reason(
    public_app: Synthesized,
) -> None:
    ours = [ack for ack in public_app.acknowledged_rules() if ack[1].startswith("AwsSolutions-")]
    assert ours, "expected the cluster's acknowledgments"
    for path, rule_id, reason in ours:
        assert len(reason) >= 80, f"{path}: reason for {rule_id} is too thin to review"
        granular = rule_id.split("[")[0] in ("AwsSolutions-IAM4", "AwsSolutions-IAM5")
        assert not granular or rule_id.endswith("]"), f"{path}: {rule_id} must name its finding"


def test_nist_800_53_rev5_report(
    default_app: Synthesized, capsys: pytest.CaptureFixture[str]
) -> None:
    """Printed, not gating (docs/verification.md, "What is verified before deploy", says why); the
    rules we meet must stay met."""
    counts: Counter[str] = Counter()
    for stack in _stacks(default_app):
        for violation in NIST80053R5Checks().validate_scope(stack).violations:
            counts[violation.rule_name] += len(violation.violating_resources)
    with capsys.disabled():
        print("\nNIST 800-53 rev 5 findings (rule: resources):")
        for rule, count in sorted(counts.items()):
            print(f"  {rule}: {count}")
    assert not NIST_RULES_WE_MEET & counts.keys()
