"""Every stack's template, recorded. Review the diff; `make snapshots` re-records after a change."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from tests.configurations import CONFIGURATIONS
from tests.conftest import STACK_ROLES, Synthesized

# Asset hashes change with aws-cdk-lib releases and bundling details, not with our intent.
ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def normalized(template: dict[str, Any]) -> dict[str, Any]:
    return json.loads(ASSET_HASH.sub("<asset-hash>", json.dumps(template)))


@pytest.fixture
def snapshot_json(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("role", STACK_ROLES)
@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_template_matches_snapshot(
    synthesize: Callable[[str], Synthesized],
    snapshot_json: SnapshotAssertion,
    configuration: str,
    role: str,
) -> None:
    assert normalized(synthesize(configuration).templates[role]) == snapshot_json
