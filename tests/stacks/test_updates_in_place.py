"""Changing capacity, the model or alarm thresholds updates in place: the VPC, the cluster, the
keys and the metrics workspace keep their logical ids and properties, so CloudFormation never
replaces them."""

from __future__ import annotations

import pytest

from tests.conftest import Synthesized

REPLACEMENT_SENSITIVE = (
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EKS::Cluster",
    "AWS::KMS::Key",
    "AWS::APS::Workspace",
    "AWS::ElastiCache::ReplicationGroup",
)


@pytest.fixture(scope="module")
def resized(synthesize) -> dict[str, dict]:
    """By stack name. A variant of the shared synth cache (tests/conftest.py), as `cdk synth`
    writes it."""
    overrides = {
        "cluster.system_nodes.scaling": '{"min_size": 3, "desired_size": 5, "max_size": 9}',
        "cluster.system_nodes.instance_type": "m7i.2xlarge",
        "network.flow_log_retention_days": "90",
        "gpu_nodes.prefill.scaling": '{"min_size": 0, "desired_size": 4, "max_size": 8}',
        "gpu_nodes.decode.instance_type": "p5e.48xlarge",
        "serving.model.id": "Qwen/Qwen3-14B",
        "observability.alarms": '{"ttft_p95_objective_seconds": 0.8, "emails": ["a@example.com"]}',
    }
    variant = synthesize("default", overrides)
    return {variant.settings.stack_name(role): t for role, t in variant.templates.items()}


def test_resizing_nodes_keeps_vpc_cluster_and_keys(default_app: Synthesized, resized: dict) -> None:
    for role, template in default_app.templates.items():
        after = resized[default_app.settings.stack_name(role)]["Resources"]
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] in REPLACEMENT_SENSITIVE:
                assert after.get(logical_id) == resource, f"{role}/{logical_id} would change"


def test_the_resize_did_reach_the_node_group(default_app: Synthesized, resized: dict) -> None:
    (group,) = [
        resource
        for logical_id, resource in resized[default_app.settings.stack_name("cluster")][
            "Resources"
        ].items()
        if logical_id.startswith("SystemNodesNodegroup")
    ]
    assert group["Properties"]["ScalingConfig"]["DesiredSize"] == 5


def test_the_new_objective_did_reach_the_alert_rules(
    default_app: Synthesized, resized: dict
) -> None:
    observability = resized[default_app.settings.stack_name("observability")]["Resources"]
    (rules,) = [r for r in observability.values() if r["Type"] == "AWS::APS::RuleGroupsNamespace"]
    assert "> 0.8" in rules["Properties"]["Data"]


def test_resizing_a_fault_tolerant_deployment_keeps_the_gcs_store(
    public_app: Synthesized, synthesize
) -> None:
    """With GCS fault tolerance: node counts, the model and objectives leave the store alone."""
    overrides = {
        "gpu_nodes.decode.scaling": '{"min_size": 1, "desired_size": 3, "max_size": 4}',
        "serving.model.id": "meta-llama/Llama-3.1-8B-Instruct",
    }
    after = synthesize("public-endpoint", overrides).templates["serving"]["Resources"]
    before = public_app.templates["serving"]["Resources"]
    stores = {lid: r for lid, r in before.items() if r["Type"] in REPLACEMENT_SENSITIVE}
    assert any(r["Type"] == "AWS::ElastiCache::ReplicationGroup" for r in stores.values())
    for logical_id, resource in stores.items():
        assert after.get(logical_id) == resource, logical_id
