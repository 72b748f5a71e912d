"""The app configurations under test, as `-c` overrides on top of cdk.json.

Written as CLI-style overrides (dotted keys, string values) so that every synthesized
configuration also exercises the loader's override path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app_config import ConfigError, Settings, load_settings
from app_config.errors import Finding
from serving_manifests import ServingManifests, render
from serving_manifests.names import EndpointBinding, GcsStoreBinding

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cdk_json_context() -> dict[str, Any]:
    """The context `cdk synth` sees from cdk.json: settings defaults and feature flags."""
    return json.loads((PROJECT_ROOT / "cdk.json").read_text())["context"]


CONFIGURATIONS: dict[str, dict[str, str]] = {
    # Exactly what `make synth` builds.
    "default": {},
    # Every optional feature on: account-bound, AZ names, public endpoint, extra admins, tags,
    # throw-away data, the older Kubernetes minor, the image from the account's own ECR mirror
    # (a pull-through cache of its own, its scan required clean).
    "public-endpoint": {
        "account": "123456789012",
        "cluster.kubernetes_version": "1.35",  # the older minor still offered
        "network.availability_zones": '["us-west-2a", "us-west-2b", "us-west-2c"]',
        "network.gpu_availability_zone": "us-west-2b",
        "network.nat_gateways": "3",
        "cluster.endpoint_access": "public_and_private",
        "cluster.public_access_cidrs": '["203.0.113.0/24"]',
        "cluster.admin_principal_arns": '["arn:aws:iam::123456789012:role/PlatformAdmins"]',
        "cluster.operator_principal_arns": '["arn:aws:iam::123456789012:role/LlmOnCall"]',
        "retain_data_on_destroy": "false",
        "tags": '{"team": "ml-platform"}',
        # The plain listener, chosen explicitly: TLS with the user's certificate, no sign-in.
        "serving.endpoint.authentication": "none",
        "serving.endpoint.scheme": "internet-facing",
        "serving.endpoint.source_cidrs": '["198.51.100.0/24"]',
        "serving.endpoint.certificate_arn": (
            "arn:aws:acm:us-west-2:123456789012:certificate/0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"
        ),
        "serving.model.id": "meta-llama/Llama-3.1-70B-Instruct",
        "serving.model.hf_token_secret_arn": (
            "arn:aws:secretsmanager:us-west-2:123456789012:secret:hf-token-AbCdEf"
        ),
        "serving.gcs_fault_tolerance.enabled": "true",
        "observability.alarms": '{"emails": ["oncall@example.com", "ml-platform@example.com"], '
        '"ttft_p95_objective_seconds": 1.5, "itl_p95_objective_seconds": 0.05, '
        '"decode_queue_growth_minutes": 15, "node_shortfall_minutes": 30}',
        "observability.container_logs": "false",
        "serving.image_mirror": '{"repository": "arn:aws:ecr:us-west-2:123456789012:repository/'
        'ecr-public/deep-learning-containers/ray", "pull_through_cache": true, '
        '"require_clean_scan": true}',
    },
    # Reserved P5-class capacity, the usual way to get it: a Capacity Block for prefill, an
    # On-Demand Capacity Reservation for decode, extra labels and taints; weights from S3;
    # decode with TP 4 and two replicas per node; prefill with a KV offload tier; the image through
    # the account's scanned cache.
    "reserved-capacity": {
        # A reservation lives in one zone: the GPU zone is given, not derived.
        "network.gpu_availability_zone": "usw2-az1",
        # The signed API's VPC endpoint admits two named client groups, not the VPC.
        "serving.endpoint.client_security_group_ids": (
            '["sg-0123456789abcdef0", "sg-0fedcba987654321f"]'
        ),
        "gpu_nodes.prefill.instance_type": "p5en.48xlarge",
        "gpu_nodes.prefill.capacity.type": "capacity_block",
        "gpu_nodes.prefill.capacity.reservation_id": "cr-0a1b2c3d4e5f60718",
        "gpu_nodes.prefill.capacity.reserved_instances": "2",
        "gpu_nodes.prefill.scaling": '{"min_size": 2, "desired_size": 2, "max_size": 2}',
        "gpu_nodes.decode.instance_type": "p5en.48xlarge",
        "gpu_nodes.decode.capacity.type": "capacity_reservation",
        "gpu_nodes.decode.capacity.reservation_id": "cr-0fedcba9876543210",
        "gpu_nodes.decode.capacity.reserved_instances": "2",
        "gpu_nodes.decode.labels": '{"team.example.com/cost-center": "llm"}',
        "gpu_nodes.decode.taints": '[{"key": "example.com/dedicated", "value": "llm", '
        '"effect": "PreferNoSchedule"}]',
        "serving.model.s3_uri": "s3://example-models/qwen/Qwen3-32B",
        "serving.decode.tensor_parallel_size": "4",
        "serving.decode.max_replicas": "2",
        # Prefill keeps evicted KV blocks in host memory beside NIXL (a MultiConnector).
        "serving.prefill.kv_offload_gib_per_gpu": "16",
        "serving.name": "qwen3-pd",
        "serving.namespace": "inference",
        "observability.scrape_interval_seconds": "60",
        "observability.log_retention_days": "90",
        "observability.alarms.efa_error_events_threshold": "5",
        "serving.image_cache.enabled": "true",
        "serving.image_cache.scanning": "enhanced",
        "serving.image_cache.replace_registry_scanning": "true",
    },
}


# The example files users start from (examples/*.yaml), each read as `cdk synth -c config=...`
# reads it: every one passes every check that the configurations above pass.
EXAMPLES = (
    "trial-one-node",
    "quickstart",
    "trial-g6e",
    "capacity-block",
    "deepseek-v3-pd",
    "deepseek-v3-pd-one-node",
    "qwen3-235b-a22b-pd",
    "existing-vpc",
    "existing-cluster",
)
for _example in EXAMPLES:
    CONFIGURATIONS[_example] = {"config": str(PROJECT_ROOT / "examples" / f"{_example}.yaml")}


def context_for(name: str, **extra: str) -> dict[str, Any]:
    return {**cdk_json_context(), **CONFIGURATIONS[name], **extra}


def settings_for(name: str, **extra: str) -> Settings:
    """A configuration under test, validated as `cdk synth` would, without synthesizing."""
    return load_settings(context_for(name, **extra), {})


def refusals(name: str, **extra: str) -> list[Finding]:
    """The findings a configuration that must not load is refused with (the bad-input tables'
    one step); a configuration that loads fails the test."""
    with pytest.raises(ConfigError) as raised:
        settings_for(name, **extra)
    return raised.value.problems


def load_problems(name: str, **extra: str) -> list[tuple[str, str, str]]:
    """(code, setting, message) of every error a configuration is refused with; none where it
    loads (for tables whose rows may load)."""
    try:
        settings_for(name, **extra)
    except ConfigError as error:
        return [(p.code, p.path, str(p)) for p in error.problems]
    return []


# What CloudFormation returns once the serving stack exists, for rendering manifests offline.
ACCOUNT = "123456789012"  # the example deployment's account
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/ray-pods"
ENDPOINT = EndpointBinding(
    target_group_arn="arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/pd/0a1b2c3d",
    load_balancer_security_group_id="sg-0a1b2c3d4e5f60718",
    load_balancer_cidrs=("10.0.96.0/27", "10.0.96.32/27"),
)
GCS_STORE = GcsStoreBinding(
    host="master.pd-llm-gcs.abc123.usw2.cache.amazonaws.com",
    port=6379,
    auth_token_secret_arn="arn:aws:secretsmanager:us-west-2:123456789012:secret:gcs-AbCdEf",
    head_role_arn="arn:aws:iam::123456789012:role/ray-head",
)


def render_deployed(
    settings: Settings, *, role_arn: str | None = ROLE_ARN, endpoint: bool = True
) -> ServingManifests:
    """The manifests as the serving stack applies them, with example deployed resources."""
    gcs_store = GCS_STORE if settings.serving.gcs_fault_tolerance.enabled else None
    return render(settings, role_arn, ENDPOINT if endpoint else None, gcs_store, account=ACCOUNT)
