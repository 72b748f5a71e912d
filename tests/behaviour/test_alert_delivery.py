"""Alarms and alerts reach the topic: the topic's KMS key policy evaluated for each publisher
with the request context that publisher's deliveries carry, the way KMS evaluates conditions
(a condition on a key absent from the context does not match)."""

from __future__ import annotations

from typing import Any

from constructs.cluster.alarm_topic import CLOUDWATCH, EVENTBRIDGE, PROMETHEUS
from tests.conftest import Synthesized

ACCOUNT = {"Ref": "AWS::AccountId"}
# What each publisher's KMS requests carry. EventBridge: the SNS developer guide ("Enable
# compatibility between event sources from AWS services and encrypted topics") states source
# keys are not supported for EventBridge to encrypted topics, so none is assumed. AMP documents
# none for the key either. CloudWatch alarms are the guide's documented case with the keys.
CONTEXTS: dict[str, dict[str, Any]] = {
    CLOUDWATCH: {"aws:SourceAccount": ACCOUNT},
    EVENTBRIDGE: {},
    PROMETHEUS: {},
}
ENCRYPT = ("kms:GenerateDataKey*", "kms:Decrypt")


def _principals(statement: dict[str, Any]) -> list[str]:
    services = statement.get("Principal", {}).get("Service", [])
    return services if isinstance(services, list) else [services]


def _conditions_hold(conditions: dict[str, Any], context: dict[str, Any]) -> bool:
    for operator, pairs in conditions.items():
        for key, expected in pairs.items():
            if key not in context:
                return False  # KMS: a condition on an absent key does not match
            if operator.startswith("String") and context[key] != expected:
                return False
    return True


def key_allows(policy: dict[str, Any], service: str, context: dict[str, Any]) -> bool:
    for action in ENCRYPT:
        granted = False
        for statement in policy["Statement"]:
            actions = statement["Action"]
            actions = actions if isinstance(actions, list) else [actions]
            if (
                statement["Effect"] == "Allow"
                and service in _principals(statement)
                and action in actions
                and _conditions_hold(statement.get("Condition", {}), context)
            ):
                granted = True
        if not granted:
            return False
    return True


def _topic_key_policy(app: Synthesized) -> dict[str, Any]:
    (topic,) = app.resources("cluster", "AWS::SNS::Topic").values()
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    return app.templates["cluster"]["Resources"][key_id]["Properties"]["KeyPolicy"]


def test_every_publisher_can_encrypt_to_the_topic(default_app: Synthesized) -> None:
    policy = _topic_key_policy(default_app)
    for service, context in CONTEXTS.items():
        assert key_allows(policy, service, context), service


def test_a_source_account_condition_would_have_silenced_health_events(
    default_app: Synthesized,
) -> None:
    """The shape this replaced: one statement for all publishers, with aws:SourceAccount."""
    old = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": [CLOUDWATCH, EVENTBRIDGE, PROMETHEUS]},
                "Action": list(ENCRYPT),
                "Condition": {"StringEquals": {"aws:SourceAccount": ACCOUNT}},
            }
        ]
    }
    assert key_allows(old, CLOUDWATCH, CONTEXTS[CLOUDWATCH])
    assert not key_allows(old, EVENTBRIDGE, CONTEXTS[EVENTBRIDGE])


def test_cloudwatch_keeps_its_confused_deputy_condition(default_app: Synthesized) -> None:
    policy = _topic_key_policy(default_app)
    assert not key_allows(policy, CLOUDWATCH, {"aws:SourceAccount": "444455556666"})
