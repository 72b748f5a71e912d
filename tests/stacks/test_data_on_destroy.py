"""What `cdk destroy` keeps: every resource that holds data follows retain_data_on_destroy, in
every stack, aws-cdk-lib's own log groups included; nothing kept is left encrypted with a key
that goes."""

from __future__ import annotations

import pytest

from tests.conftest import STACK_ROLES, Synthesized

KEPT = "RetainExceptOnCreate"  # retained, except when the create that made it rolls back
DATA = ("AWS::Logs::LogGroup", "AWS::KMS::Key", "AWS::APS::Workspace")


@pytest.fixture(scope="module", params=["default", "public-endpoint"])
def synthesized(request, synthesize) -> Synthesized:
    return synthesize(request.param)


def test_every_data_resource_follows_retain_data_on_destroy(synthesized: Synthesized) -> None:
    expected = KEPT if synthesized.settings.retain_data_on_destroy else "Delete"
    checked = 0
    for role in STACK_ROLES:
        for resource_type in DATA:
            for logical_id, resource in synthesized.resources(role, resource_type).items():
                assert resource.get("DeletionPolicy") == expected, f"{role}/{logical_id}"
                checked += 1
    assert checked > 10


def test_no_kept_log_group_outlives_its_key(synthesized: Synthesized) -> None:
    for role in STACK_ROLES:
        resources = synthesized.templates[role]["Resources"]
        for logical_id, group in synthesized.resources(role, "AWS::Logs::LogGroup").items():
            key = group["Properties"].get("KmsKeyId")
            if isinstance(key, dict) and "Fn::GetAtt" in key:
                key_resource = resources[key["Fn::GetAtt"][0]]
                if group["DeletionPolicy"] != "Delete":
                    assert key_resource["DeletionPolicy"] != "Delete", f"{role}/{logical_id}"


def test_the_gcs_store_follows_the_setting(synthesize) -> None:
    """Deleted with throw-away data; kept as a final snapshot otherwise (a retained replication
    group would keep billing)."""
    thrown_away = synthesize("public-endpoint")  # GCS store on, retain_data_on_destroy false
    (store,) = thrown_away.resources("serving", "AWS::ElastiCache::ReplicationGroup").values()
    assert store["DeletionPolicy"] == "Delete"
    retained = synthesize("public-endpoint", {"retain_data_on_destroy": "true"})
    (kept,) = retained.resources("serving", "AWS::ElastiCache::ReplicationGroup").values()
    assert kept["DeletionPolicy"] == "Snapshot"
