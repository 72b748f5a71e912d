"""cdk-nag: AwsSolutions gates (as in `cdk synth`); NIST 800-53 rev 5 is a report with a floor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks, NIST80053R5Checks

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
def test_aws_solutions_has_no_unacknowledged_findings(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    for stack in _stacks(synthesize(configuration)):
        report = AwsSolutionsChecks().validate_scope(stack)
        findings = {
            v.rule_name: [r.construct_path for r in v.violating_resources]
            for v in report.violations
        }
        assert findings == {}, stack.stack_name


def _acknowledgments(synthesized: Synthesized) -> Iterator[tuple[str, str, str]]:
    key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    for construct in synthesized.built.app.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:
                for rule_id, reason in entry.data.items():
                    yield construct.node.path, rule_id.removeprefix("Annotation::"), reason


def test_every_acknowledgment_names_an_exact_finding_and_a_specific_reason(
    public_app: Synthesized,
) -> None:
    ours = [ack for ack in _acknowledgments(public_app) if ack[1].startswith("AwsSolutions-")]
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
