"""The configuration's warnings, printed by `cdk synth` on the stack each is about.

The rules (app_config/rules) decide what to warn about; this only reports. A warning the
configuration acknowledges (`acknowledged_warnings`) is acknowledged the CDK's own way
(`Annotations.acknowledge_warning`, so `cdk synth --strict` passes) and its reason is printed as
an info line, so the decision stays visible in every synth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Annotations

from app_config import Settings
from app_config.rules import evaluate, rules, warnings

if TYPE_CHECKING:
    from stacks.assembly import Stacks

WARNING_PREFIX = "pd-llm:"


def report_warnings(stacks: Stacks, settings: Settings) -> None:
    where = {code: rule.stack for rule in rules() for code in rule.codes}
    reasons = {ack.code: ack.reason for ack in settings.acknowledged_warnings}
    for finding in warnings(evaluate(settings)):
        annotations = Annotations.of(stacks.by_role(where[finding.code]))
        warning_id = f"{WARNING_PREFIX}{finding.code}"
        if finding.code in reasons:
            annotations.acknowledge_warning(warning_id, reasons[finding.code])
            annotations.add_info(f"{warning_id} acknowledged: {reasons[finding.code]}")
        annotations.add_warning_v2(warning_id, str(finding))
