"""The app configurations under test, as `-c` overrides on top of cdk.json.

Written as CLI-style overrides (dotted keys, string values) so that every synthesized
configuration also exercises the loader's override path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cdk_json_context() -> dict[str, Any]:
    """The context `cdk synth` sees from cdk.json: settings defaults and feature flags."""
    return json.loads((PROJECT_ROOT / "cdk.json").read_text())["context"]


CONFIGURATIONS: dict[str, dict[str, str]] = {
    # Exactly what `make synth` builds.
    "default": {},
    # Every optional feature on: account-bound, AZ names, public endpoint, extra admins, tags,
    # throw-away data.
    "public-endpoint": {
        "account": "123456789012",
        "network.availability_zones": '["us-west-2a", "us-west-2b", "us-west-2c"]',
        "network.gpu_availability_zone": "us-west-2b",
        "network.nat_gateways": "3",
        "cluster.endpoint_access": "public_and_private",
        "cluster.public_access_cidrs": '["203.0.113.0/24"]',
        "cluster.admin_principal_arns": '["arn:aws:iam::123456789012:role/PlatformAdmins"]',
        "retain_data_on_destroy": "false",
        "tags": '{"team": "ml-platform"}',
    },
}


def context_for(name: str, **extra: str) -> dict[str, Any]:
    return {**cdk_json_context(), **CONFIGURATIONS[name], **extra}
