"""Routine changes and what CloudFormation replaces for each, decided by the resource schemas'
create-only properties (tests/replacement_model.py). docs/operating.md's table "What a change
replaces" is this test's table."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Synthesized
from tests.replacement_model import replaced

# change -> the resource types it may replace (empty: nothing is replaced).
ROUTINE: dict[str, tuple[dict[str, str], frozenset[str]]] = {
    "node counts": (
        {
            "cluster.system_nodes.scaling": '{"min_size": 3, "desired_size": 3, "max_size": 6}',
            "gpu_nodes.decode.scaling": '{"min_size": 1, "desired_size": 2, "max_size": 2}',
        },
        frozenset(),
    ),
    "system instance type": ({"cluster.system_nodes.instance_type": "m7i.2xlarge"}, frozenset()),
    "GPU instance type": ({"gpu_nodes.decode.instance_type": "p5e.48xlarge"}, frozenset()),
    "tags": ({"tags": '{"team": "ml-platform", "cost-center": "42"}'}, frozenset()),
    "model and engine": (
        {"serving.model.id": "Qwen/Qwen3-14B", "serving.max_model_len": "16384"},
        frozenset(),
    ),
    "image digest": ({"serving.image_digest": "sha256:" + "ab" * 32}, frozenset()),
    # The default's minor against the older one: a Version change, in place on the cluster, its
    # node groups and kube-proxy; replacements are decided the same either way (EKS itself only
    # goes up, one minor at a time). The kubectl provider gets a new layer version with the
    # minor's kubectl (layer versions are immutable); its function is updated, not replaced.
    "Kubernetes minor": (
        {"cluster.kubernetes_version": "1.35"},
        frozenset({"AWS::Lambda::LayerVersion"}),
    ),
    "drain timeout": ({"serving.drain_timeout_seconds": "600"}, frozenset()),
    "scaling behaviour": (
        {
            "serving.decode.autoscaling.target_ongoing_requests": "48",
            "serving.ray_autoscaler.idle_timeout_seconds": "900",
            "cluster.node_autoscaler.scale_down_unneeded_minutes": "20",
            "serving.prefill.request_router": "power_of_two",
        },
        frozenset(),
    ),
    "image cache": ({"serving.image_cache.enabled": "true"}, frozenset()),
    # The variant tests/stacks/test_image_mirror.py synthesizes too (one synth for both).
    "image mirror": (
        {
            "serving.image_mirror": '{"repository": '
            '"210987654321.dkr.ecr.us-west-2.amazonaws.com/dlc/ray"}'
        },
        frozenset(),
    ),
    "alarm thresholds": (
        {"observability.alarms": '{"ttft_p95_objective_seconds": 0.8}'},
        frozenset(),
    ),
    "log retention": ({"observability.log_retention_days": "90"}, frozenset()),
    "admins and operators": (
        {"cluster.admin_principal_arns": '["arn:aws:iam::123456789012:role/Admin"]'},
        frozenset(),
    ),
    # Not routine, and said so in docs/operating.md: the node group's capacity type is create-only,
    # and a reservation replaces the placement group.
    "on demand to Capacity Block": (
        {
            "network.gpu_availability_zone": "usw2-az1",  # the reservation's zone, as before
            "gpu_nodes.decode.capacity.type": "capacity_block",
            "gpu_nodes.decode.capacity.reservation_id": "cr-0123456789abcdef0",
            "gpu_nodes.decode.capacity.reserved_instances": "2",
        },
        frozenset({"AWS::EKS::Nodegroup"}),
    ),
    # With the signed API (the default) the scheme is the API's type: private to regional keeps
    # the API and the load balancer; the API's own VPC endpoint and its group go (a new URL),
    # and with them the tunnel to it: its Session document and the policy that opens it.
    "endpoint scheme": (
        {
            "serving.endpoint.scheme": "internet-facing",
            "serving.endpoint.source_cidrs": '["198.51.100.0/24"]',
        },
        frozenset(
            {
                "AWS::EC2::VPCEndpoint",
                "AWS::EC2::SecurityGroup",
                "AWS::SSM::Document",
                "AWS::IAM::ManagedPolicy",
            }
        ),
    ),
}
# aws-cdk-lib names an API's Deployment after a hash of the API's definition (tags included): a
# change makes a new deployment snapshot that the same stage then serves, at the same URL.
EXPECTED_EVERYWHERE = frozenset({"AWS::ApiGateway::Deployment"})
# Never replaced by any of the changes above.
PERMANENT = frozenset(
    {
        "AWS::EC2::VPC",
        "AWS::EC2::Subnet",
        "AWS::EKS::Cluster",
        "AWS::KMS::Key",
        "AWS::Logs::LogGroup",
        "AWS::APS::Workspace",
        "AWS::SNS::Topic",
    }
)


def _templates(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        synthesized.settings.stack_name(role): template
        for role, template in synthesized.templates.items()
    }


@pytest.mark.parametrize("change", list(ROUTINE))
def test_what_a_change_replaces(change: str, default_app: Synthesized, synthesize) -> None:
    """Each change is a variant of the default synthesized once per run (the shared cache: a
    test elsewhere that needs the same variant reads the same synth); the baseline is the
    default itself."""
    overrides, may_replace = ROUTINE[change]
    baseline = _templates(default_app)
    after = _templates(synthesize("default", overrides))
    replaced_types = {}
    for stack, template in baseline.items():
        for logical_id, why in replaced(template, after[stack]).items():
            resource_type = template["Resources"][logical_id]["Type"]
            replaced_types.setdefault(resource_type, []).append(f"{stack}/{logical_id}: {why}")
    unexpected = {
        t: w for t, w in replaced_types.items() if t not in may_replace | EXPECTED_EVERYWHERE
    }
    assert unexpected == {}, unexpected
    assert not PERMANENT & replaced_types.keys()
