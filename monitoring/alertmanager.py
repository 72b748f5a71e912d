"""The workspace's alert manager: every alert of the rules to the encrypted alarm topic."""

from __future__ import annotations

import textwrap
from typing import Any

import yaml


def render_alertmanager_definition(topic_arn: str, region: str) -> str:
    """The workspace's AlertManagerDefinition: a document whose ``alertmanager_config`` is the
    alert manager's own YAML as a string."""
    config = yaml.safe_dump(render_alertmanager(topic_arn, region), sort_keys=False)
    return "alertmanager_config: |\n" + textwrap.indent(config, "  ")


def render_alertmanager(topic_arn: str, region: str) -> dict[str, Any]:
    """Every alert to the alarm topic; a short subject, since SNS caps subjects at 100 chars."""
    receiver = "alarm-topic"
    return {
        "route": {
            "receiver": receiver,
            "group_by": ["alertname"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
        },
        "receivers": [
            {
                "name": receiver,
                "sns_configs": [
                    {
                        "topic_arn": topic_arn,
                        "sigv4": {"region": region},
                        "subject": "[{{ .Status }}] {{ .GroupLabels.alertname }}",
                        "attributes": {"source": "amazon-managed-prometheus"},
                    }
                ],
            }
        ],
    }
