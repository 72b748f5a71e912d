"""Bad input fails before any construct exists, naming the setting and what would be valid."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import app
from app_config import ConfigError, load_settings
from app_config.aws_tags import TAGS_ADDED_BY_APP, TAGS_PER_RESOURCE
from catalog.instances import CAPACITY_BLOCK_TYPES, CATALOG
from catalog.regions import default_zone_ids
from tests.configurations import PROJECT_ROOT, cdk_json_context

SECRET_ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:t-AbCdEf"
CERTIFICATE_ARN = (
    "arn:aws:acm:us-west-2:123456789012:certificate/0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"
)

# Each row: `-c` overrides, the setting the message must name, a fragment of the explanation.
INVALID = [
    ({"region": "us-west-9"}, "region", "valid: af-south-1"),
    ({"prefix": "PD_LLM"}, "prefix", "lower-case letters, digits"),
    ({"account": "12345"}, "account", "12-digit AWS account id"),
    ({"bootstrap_qualifier": "pd-llm-prod"}, "bootstrap_qualifier", "11 characters; at most 10"),
    ({"bootstrap_qualifier": "pd.llm"}, "bootstrap_qualifier", "1-10 lowercase letters"),
    ({"bootstrap_qualifier": "hnb659fds"}, "bootstrap_qualifier", "is the default qualifier"),
    ({"network.nat_gateways": "two"}, "network.nat_gateways", "valid integer"),
    ({"network.nat_gateways": "3"}, "network.nat_gateways", "at most one per zone"),
    ({"network.vpc_cidr": "10.0.0.1/16"}, "network.vpc_cidr", "host bits"),
    ({"network.vpc_cidr": "10.0.0.0/8"}, "network.vpc_cidr", "/16 to /24"),
    ({"network.vpc_cidr": "10.0.0.0/20"}, "network.vpc_cidr", "too small"),
    (
        {"network.private_subnet_mask": "30"},
        "network.private_subnet_mask",
        "less than or equal to 28",
    ),
    (
        {"network.flow_log_retention_days": "42"},
        "network.flow_log_retention_days",
        "a retention CloudWatch Logs accepts",
    ),
    ({"network.availability_zones": '["usw2-az1"]'}, "network.availability_zones", "at least 2"),
    (
        {"network.availability_zones": '["usw2-az1", "use1-az2"]'},
        "network.availability_zones[1]",
        "not a zone of us-west-2",
    ),
    (
        {"network.availability_zones": '["usw2-az1", "us-west-2b"]'},
        "network.availability_zones",
        "mixes AZ names and AZ IDs",
    ),
    (
        {"network.gpu_availability_zone": "usw2-az3"},
        "network.gpu_availability_zone",
        "must be one of network.availability_zones",
    ),
    (
        {
            "region": "us-east-1",
            "network.availability_zones": '["use1-az1", "use1-az3"]',
            "network.gpu_availability_zone": "use1-az1",
        },
        "network.availability_zones[1]",
        "UnsupportedAvailabilityZoneException",
    ),
    ({"network.subnets": "{}"}, "network.subnets", "unknown setting; valid settings here"),
    ({"cluster.endpoint_access": "public"}, "cluster.endpoint_access", "'private' or "),
    ({"cluster.endpoint_access": "public_and_private"}, "cluster", "needs public_access_cidrs"),
    (
        {
            "cluster.endpoint_access": "public_and_private",
            "cluster.public_access_cidrs": '["0.0.0.0/0"]',
        },
        "cluster",
        "allow_public_access_from_anywhere",
    ),
    (
        {"cluster.public_access_cidrs": '["198.51.100.0/24"]'},
        "cluster",
        "endpoint_access is 'private'",
    ),
    (
        {"cluster.admin_principal_arns": '["arn:aws:iam::123:role/x"]'},
        "cluster.admin_principal_arns",
        "not an IAM role or user ARN",
    ),
    (
        {"cluster.system_nodes.instance_type": "large"},
        "cluster.system_nodes.instance_type",
        "family.size",
    ),
    (
        {"cluster.system_nodes.scaling": '{"min_size": 3, "desired_size": 2, "max_size": 4}'},
        "cluster.system_nodes.scaling",
        "min_size <= desired_size <= max_size",
    ),
    (
        {"cluster.system_nodes.disk_size_gib": "8"},
        "cluster.system_nodes.disk_size_gib",
        "greater than or equal to 20",
    ),
    ({"tags": '{"aws:owner": "me"}'}, "tags", "keys starting with aws: belong to AWS"),
    # GPU node groups
    (
        {"gpu_nodes.prefill.instance_type": "g5.48xlarge"},
        "gpu_nodes.prefill.instance_type",
        "g6e.8xlarge, p4d.24xlarge",
    ),
    (
        {"gpu_nodes.prefill.instance_type": "p4d.24xlarge"},
        "gpu_nodes",
        "cannot exchange EFA traffic",
    ),
    (
        {
            "gpu_nodes.prefill.instance_type": "p4d.24xlarge",
            "gpu_nodes.decode.instance_type": "p4de.24xlarge",
        },
        "gpu_nodes",
        "cannot exchange EFA traffic",
    ),
    (
        {"gpu_nodes.decode.capacity.type": "capacity_block"},
        "gpu_nodes.decode.capacity",
        "needs reservation_id",
    ),
    *[
        (
            {
                "gpu_nodes.prefill.instance_type": instance_type,
                "gpu_nodes.decode.instance_type": instance_type,
                "gpu_nodes.decode.capacity.type": "capacity_block",
                "gpu_nodes.decode.capacity.reservation_id": "cr-0fedcba9876543210",
                "gpu_nodes.decode.capacity.reserved_instances": "2",
                "network.gpu_availability_zone": "usw2-az1",
            },
            "gpu_nodes.decode",
            f"Capacity Blocks for ML are not sold for {instance_type}",
        )
        for instance_type in sorted(set(CATALOG) - CAPACITY_BLOCK_TYPES)
    ],
    (
        {"gpu_nodes.decode.capacity.reservation_id": "cr-0123456789abcdef0"},
        "gpu_nodes.decode.capacity",
        "type is 'on_demand'",
    ),
    (
        {
            "gpu_nodes.decode.capacity.type": "capacity_reservation",
            "gpu_nodes.decode.capacity.reservation_id": "odcr-1",
        },
        "gpu_nodes.decode.capacity.reservation_id",
        "cr- followed by 8 to 17 hexadecimal digits",
    ),
    (
        {
            "gpu_nodes.decode.capacity.type": "capacity_reservation",
            "gpu_nodes.decode.capacity.reservation_id": "cr-0123456789abcdef0",
        },
        "gpu_nodes.decode.capacity",
        "needs reserved_instances",
    ),
    (
        {
            "gpu_nodes.decode.capacity.type": "capacity_block",
            "gpu_nodes.decode.capacity.reservation_id": "cr-0123456789abcdef0",
            "gpu_nodes.decode.capacity.reserved_instances": "2",
            "gpu_nodes.decode.scaling": '{"min_size": 1, "desired_size": 1, "max_size": 3}',
        },
        "gpu_nodes.decode",
        "exceeds capacity.reserved_instances 2",
    ),
    (
        {"gpu_nodes.decode.capacity.reserved_instances": "2"},
        "gpu_nodes.decode.capacity",
        "reserved_instances is set but type is 'on_demand'",
    ),
    (
        {"gpu_nodes.prefill.taints": '[{"key": "example.com/dedicated", "effect": "NoSchedule"}]'},
        "gpu_nodes.prefill.taints",
        "skips taints without a value",
    ),
    (
        {"serving.ray_autoscaler.idle_timeout_seconds": "5"},
        "serving.ray_autoscaler.idle_timeout_seconds",
        "greater than or equal to 30",
    ),
    (
        {"cluster.node_autoscaler.max_node_provision_minutes": "1"},
        "cluster.node_autoscaler.max_node_provision_minutes",
        "greater than or equal to 5",
    ),
    (
        {"gpu_nodes.prefill.scaling": '{"min_size": 2, "desired_size": 1, "max_size": 2}'},
        "gpu_nodes.prefill.scaling",
        "min_size <= desired_size <= max_size",
    ),
    (
        {"gpu_nodes.decode.scaling": '{"min_size": 0, "desired_size": 0, "max_size": 0}'},
        "gpu_nodes.decode.scaling.max_size",
        "greater than or equal to 1",
    ),
    (
        {"gpu_nodes.decode.labels": '{"llm-serving/role": "prefill"}'},
        "gpu_nodes.decode.labels",
        "set by this app",
    ),
    (
        {"gpu_nodes.decode.taints": '[{"key": "nvidia.com/gpu", "effect": "NoExecute"}]'},
        "gpu_nodes.decode.taints",
        "set by this app",
    ),
    (
        {"gpu_nodes.prefill.taints": '[{"key": "a/b", "value": "x", "effect": "NoExecute"}]'},
        "gpu_nodes.prefill.taints",
        "evicts the Ray workers at once",
    ),
    (
        {"serving.decode.min_replicas": "0"},
        "serving.decode",
        "no Serve proxy is left behind the endpoint",
    ),
    (
        {"gpu_nodes.decode.taints": '[{"key": "a/b", "effect": "Sometimes"}]'},
        "gpu_nodes.decode.taints[0].effect",
        "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'",
    ),
    (
        {
            "gpu_nodes.prefill.instance_type": "p5.48xlarge",
            "gpu_nodes.decode.instance_type": "p6-b200.48xlarge",
        },
        "gpu_nodes",
        "NIXL's handshake refuses a backend mismatch",
    ),
    (
        {"serving.old_cluster_deletion_delay_seconds": "30"},
        "serving.old_cluster_deletion_delay_seconds",
        "without a healthy target",
    ),
    (
        {"serving.image_digest": "sha256:1234"},
        "serving.image_digest",
        "sha256:",
    ),
    (
        {"serving.drain_timeout_seconds": "5"},
        "serving.drain_timeout_seconds",
        "greater than or equal to 30",
    ),
    (
        {"serving.drain_timeout_seconds": "900"},
        "serving.drain_timeout_seconds",
        "waits 15 minutes for a node's pods to leave",
    ),
    (
        {"serving.stream_batching_interval_ms": "-1"},
        "serving.stream_batching_interval_ms",
        "greater than or equal to 0",
    ),
    (
        {"serving.stream_batching_interval_ms": "1001"},
        "serving.stream_batching_interval_ms",
        "less than or equal to 1000",
    ),
    (
        {"serving.stream_batching_interval_ms": "soon"},
        "serving.stream_batching_interval_ms",
        "valid number",
    ),
    (
        {"cluster.support_type": "FOREVER"},
        "cluster.support_type",
        "STANDARD",
    ),
    (
        {"gpu_nodes.prefill.root_volume_gib": "30"},
        "gpu_nodes.prefill.root_volume_gib",
        "greater than or equal to 50",
    ),
    # Serving
    (
        {"serving.prefill.tensor_parallel_size": "16"},
        "serving.prefill.tensor_parallel_size",
        "needs more GPUs than one p5.48xlarge has (8)",
    ),
    (
        {"serving.decode.tensor_parallel_size": "4", "serving.decode.pipeline_parallel_size": "4"},
        "serving.decode.tensor_parallel_size",
        "TP 4 x PP 4",
    ),
    (
        {"serving.decode.max_replicas": "3"},
        "serving.decode.max_replicas",
        "exceed the GPUs gpu_nodes.decode can grow to (2 nodes",
    ),
    (
        {"serving.kv_transfer.backend": "MOONCAKE"},
        "serving.kv_transfer.backend",
        "'LIBFABRIC' or 'UCX'",
    ),
    ({"serving.kv_transfer.block_size": "24"}, "serving.kv_transfer.block_size", "16, 32, 64"),
    (
        {
            "region": "us-gov-west-1",
            "network.availability_zones": '["usgw1-az1", "usgw1-az2"]',
            "network.gpu_availability_zone": "usgw1-az1",
        },
        "region",
        "no Ray LLM DLC registry mapping",
    ),
    ({"serving.name": "a" * 37}, "serving.name", "at most 36"),
    (
        {"serving.image_cache.enabled": "true", "serving.image_cache.scanning": "enhanced"},
        "serving.image_cache.replace_registry_scanning",
        "set replace_registry_scanning: true to consent",
    ),
    ({"serving.name": "Pd_LLM"}, "serving.name", "starting with a letter"),
    ({"serving.model.s3_uri": "s3:/models/qwen"}, "serving.model.s3_uri", "not an S3 URI"),
    (
        {"serving.model.s3_uri": "https://bucket.s3.amazonaws.com/x"},
        "serving.model.s3_uri",
        "expected s3://bucket/prefix",
    ),
    ({"serving.endpoint.scheme": "internet-facing"}, "serving.endpoint", "needs source_cidrs"),
    (
        {
            "serving.endpoint.scheme": "internet-facing",
            "serving.endpoint.source_cidrs": '["0.0.0.0/0"]',
            "serving.endpoint.authentication": "none",
            "serving.endpoint.certificate_arn": CERTIFICATE_ARN,
        },
        "serving.endpoint",
        "allow_from_anywhere",
    ),
    (
        {
            "serving.endpoint.authentication": "none",
            "serving.endpoint.scheme": "internet-facing",
            "serving.endpoint.source_cidrs": '["198.51.100.0/24"]',
        },
        "serving.endpoint",
        "needs certificate_arn",
    ),
    (
        {"serving.endpoint.authentication": "none"},
        "serving.endpoint",
        "admits only the clients you name",
    ),
    (
        {"serving.endpoint.certificate_arn": CERTIFICATE_ARN},
        "serving.endpoint",
        "certificate_arn is for authentication 'none'",
    ),
    (
        {
            "serving.endpoint.scheme": "internet-facing",
            "serving.endpoint.source_cidrs": '["198.51.100.0/24"]',
            "serving.endpoint.client_security_group_ids": '["sg-0123456789abcdef0"]',
        },
        "serving.endpoint",
        "admit clients inside the VPC",
    ),
    (
        {"serving.endpoint.client_security_group_ids": '["default"]'},
        "serving.endpoint.client_security_group_ids",
        "is not a security group id",
    ),
    (
        {"serving.model.hf_token_secret_arn": SECRET_ARN.removesuffix("-AbCdEf")},
        "serving.model.hf_token_secret_arn",
        "6-character suffix",
    ),
    ({"serving.image_tag": "latest"}, "serving.image_tag", "not a known Ray LLM image tag"),
    (
        {"serving.model.hf_token_secret_arn": "my-token"},
        "serving.model.hf_token_secret_arn",
        "6-character suffix",
    ),
    (
        {
            "serving.model.s3_uri": "s3://models/x",
            "serving.model.hf_token_secret_arn": SECRET_ARN,
        },
        "serving.model",
        "applies to Hugging Face downloads only",
    ),
    (
        {"serving.decode.min_replicas": "2", "serving.decode.max_replicas": "1"},
        "serving.decode",
        "must not exceed max_replicas",
    ),
    (
        {"serving.prefill.request_router": "prefix_cache_affinity"},
        "serving.prefill.request_router",
        "use 'prefix_affinity'",
    ),
    (
        {"serving.decode.request_router": "round_robin"},
        "serving.decode.request_router",
        "'power_of_two' or 'prefix_affinity'",
    ),
    (
        {"serving.name": "prefiller"},
        "serving.name",
        "contains 'prefill'",
    ),
    (
        {"serving.gcs_fault_tolerance.replicas": "0"},
        "serving.gcs_fault_tolerance.replicas",
        "greater than or equal to 1",
    ),
    (
        {"serving.gcs_fault_tolerance.engine_version": "6.2"},
        "serving.gcs_fault_tolerance.engine_version",
        "'7.2', '8.0' or '8.1'",
    ),
    (
        {"serving.gcs_fault_tolerance.node_type": "r7g.large"},
        "serving.gcs_fault_tolerance.node_type",
        "such as cache.r7g.large",
    ),
    *[
        (
            {"serving.gcs_fault_tolerance.node_type": node_type},
            "serving.gcs_fault_tolerance.node_type",
            f"{node_type.split('.')[1]} is a node family ElastiCache no longer creates clusters of",
        )
        for node_type in ("cache.t2.medium", "cache.m3.large", "cache.r3.large")
    ],
    (
        {"serving.old_cluster_deletion_delay_seconds": "-1"},
        "serving.old_cluster_deletion_delay_seconds",
        "greater than or equal to 0",
    ),
    # Observability
    (
        {"observability.alarms.emails": '["oncall-at-example.com"]'},
        "observability.alarms.emails[0]",
        "not a bare e-mail address",
    ),
    (
        {"observability.alarms.emails": '["oncall@example"]'},
        "observability.alarms.emails[0]",
        "not a valid email address",
    ),
    (
        {"observability.alarms.emails": '["a@example.com", "A@example.com"]'},
        "observability.alarms.emails",
        "lists A@example.com twice; each address may appear once",
    ),
    # An entry listed twice: counted once by the service, or refused, and it uses up the limit.
    (
        {"serving.endpoint.source_cidrs": '["198.51.100.0/24", "198.51.100.0/24"]'},
        "serving.endpoint.source_cidrs",
        "lists 198.51.100.0/24 twice; each CIDR may appear once",
    ),
    (
        {"serving.endpoint.client_security_group_ids": '["sg-0a1b2c3d", "sg-0a1b2c3d"]'},
        "serving.endpoint.client_security_group_ids",
        "lists sg-0a1b2c3d twice; each security group may appear once",
    ),
    (
        {
            "cluster.endpoint_access": "public_and_private",
            "cluster.public_access_cidrs": '["203.0.113.0/24", "203.0.113.0/24"]',
        },
        "cluster.public_access_cidrs",
        "lists 203.0.113.0/24 twice",
    ),
    (
        {"observability.alarms.ttft_p95_objective_seconds": "0"},
        "observability.alarms.ttft_p95_objective_seconds",
        "greater than 0",
    ),
    (
        {"observability.scrape_interval_seconds": "15"},
        "observability.scrape_interval_seconds",
        "greater than or equal to 30",
    ),
    (
        {"observability.log_retention_days": "31"},
        "observability.log_retention_days",
        "a retention CloudWatch Logs accepts",
    ),
    (
        {"observability.alarms.page_me": "true"},
        "observability.alarms.page_me",
        "unknown setting",
    ),
    # Hardening (issue 11): dangerous values, values that would fail only at deploy time.
    *[
        ({"serving.namespace": ns}, "serving.namespace", "use a namespace of its own")
        for ns in ("kube-system", "default", "kuberay-system", "kube-tools", "amazon-cloudwatch")
    ],
    (
        {
            "cluster.endpoint_access": "public_and_private",
            "cluster.public_access_cidrs": '["0.0.0.0/1", "128.0.0.0/1"]',
        },
        "cluster",
        "covers all of IPv4",
    ),
    (
        {
            "cluster.endpoint_access": "public_and_private",
            "cluster.public_access_cidrs": '["2.0.0.0/7"]',
        },
        "cluster",
        "opens the Kubernetes API to the internet",
    ),
    (
        {
            "cluster.endpoint_access": "public_and_private",
            "cluster.public_access_cidrs": '["10.20.0.0/16"]',
        },
        "cluster",
        "not an internet address range",
    ),
    (
        {
            "cluster.endpoint_access": "public_and_private",
            "cluster.public_access_cidrs": json.dumps([f"198.51.{i}.0/24" for i in range(41)]),
        },
        "cluster",
        "at most 40",
    ),
    (
        {
            "serving.endpoint.scheme": "internet-facing",
            "serving.endpoint.authentication": "none",
            "serving.endpoint.certificate_arn": CERTIFICATE_ARN,
            "serving.endpoint.source_cidrs": '["0.0.0.0/1", "128.0.0.0/1"]',
        },
        "serving.endpoint",
        "opens the model endpoint to the internet",
    ),
    (
        {
            "serving.endpoint.scheme": "internet-facing",
            "serving.endpoint.authentication": "none",
            "serving.endpoint.certificate_arn": CERTIFICATE_ARN,
            "serving.endpoint.source_cidrs": '["192.168.10.0/24"]',
        },
        "serving.endpoint",
        "admits nobody",
    ),
    ({"serving.model.s3_uri": "s3://bucket/*"}, "serving.model.s3_uri", "wildcards"),
    ({"serving.model.s3_uri": "s3://bucket/models/q?en"}, "serving.model.s3_uri", "wildcards"),
    (
        {"network.availability_zones": '["usw2-az1", "usw2-az9"]'},
        "network.availability_zones[1]",
        "usw2-az1 to -az4",
    ),
    (
        {
            "network.availability_zones": '["us-west-2a", "us-west-2z"]',
            "network.gpu_availability_zone": "us-west-2a",
        },
        "network.availability_zones[1]",
        "us-west-2a to us-west-2d",
    ),
    ({"network.vpc_cidr": "127.0.0.0/16"}, "network.vpc_cidr", "cannot be a VPC"),
    ({"network.vpc_cidr": "224.0.0.0/16"}, "network.vpc_cidr", "cannot be a VPC"),
    ({"network.vpc_cidr": "169.254.0.0/16"}, "network.vpc_cidr", "cannot be a VPC"),
    (
        {"gpu_nodes.decode.labels": '{"team": "ml platform"}'},
        "gpu_nodes.decode.labels.team",
        "not a Kubernetes label value",
    ),
    (
        {"cluster.system_nodes.instance_type": "m7g.xlarge"},
        "cluster.system_nodes.instance_type",
        "Graviton (arm64)",
    ),
    (
        {"cluster.admin_principal_arns": json.dumps(["arn:aws:iam::123456789012:role/Ops\n"])},
        "cluster.admin_principal_arns",
        "item 0: contains a control character ('\\n') at the end",
    ),
    (
        {"serving.model.hf_token_secret_arn": SECRET_ARN + "\n"},
        "serving.model.hf_token_secret_arn",
        "control character",
    ),
    ({"tags": json.dumps({"team": "x" * 300})}, "tags", "at most 256 characters"),
    ({"tags": json.dumps({"team": "a\u0000b"})}, "tags", "control character ('\\x00')"),
    ({"tags": json.dumps({"team": "a;b"})}, "tags", "characters AWS tags do not allow"),
    (
        {"tags": json.dumps({"Team": "a", "team": "b"})},
        "tags",
        "tag keys 'Team' and 'team' differ only in case; IAM takes tag keys case-insensitively",
    ),
    (
        {
            "gpu_nodes.prefill.taints": json.dumps(
                [
                    {"key": "a", "value": "b", "effect": "NoSchedule"},
                    {"key": "a", "value": "c", "effect": "NoSchedule"},
                ]
            )
        },
        "gpu_nodes.prefill.taints",
        "one taint per key and effect",
    ),
    ({"serving.model.s3_uri": "s3://bucket"}, "serving.model.s3_uri", "names a whole bucket"),
    (
        {
            "serving.endpoint.authentication": "none",
            "serving.endpoint.client_security_group_ids": '["sg-0123456789abcdef0"]',
            "serving.endpoint.certificate_arn": CERTIFICATE_ARN.replace("us-west-2", "us-east-1"),
        },
        "serving.endpoint.certificate_arn",
        "needs an ACM certificate of us-west-2",
    ),
    (
        {
            "serving.endpoint.authentication": "none",
            "serving.endpoint.client_security_group_ids": '["sg-0123456789abcdef0"]',
            "serving.endpoint.certificate_arn": CERTIFICATE_ARN.replace(
                "arn:aws:", "arn:aws-us-gov:"
            ),
        },
        "serving.endpoint.certificate_arn",
        "is in partition aws-us-gov; a deployment in us-west-2 reads ARNs of aws (arn:aws:...)",
    ),
    (
        {"serving.model.hf_token_secret_arn": SECRET_ARN.replace("us-west-2", "us-east-1")},
        "serving.model.hf_token_secret_arn",
        "is in us-east-1; the Secrets Store CSI driver reads it from Secrets Manager in the "
        "nodes' region, us-west-2",
    ),
    (
        {"serving.model.hf_token_secret_arn": SECRET_ARN.replace("arn:aws:", "arn:aws-us-gov:")},
        "serving.model.hf_token_secret_arn",
        "is in partition aws-us-gov",
    ),
    (
        {"serving.decode.tensor_parallel_size": "3"},
        "serving.decode.tensor_parallel_size",
        "does not divide the 8 GPUs",
    ),
    *[
        ({"cluster.system_nodes.instance_type": t}, "cluster.system_nodes.instance_type", f)
        for t, f in (
            ("mac2.metal", "cannot join EKS"),
            ("p5.48xlarge", "accelerated family"),
            ("t3.small", "too small"),
        )
    ],
    ({"settings": "x"}, "settings", "must be a mapping"),
    # Issue 21: limits AWS, EKS and Kubernetes apply only at deploy time, counted with what the
    # app adds; reserved prefixes; addresses; numbers the template cannot carry.
    (
        {"tags": json.dumps({f"t{i}": "v" for i in range(TAGS_PER_RESOURCE)})},
        "tags",
        f"at most {TAGS_PER_RESOURCE - TAGS_ADDED_BY_APP}",
    ),
    *[
        ({"tags": json.dumps({key: "x"})}, "tags", "belong to AWS, EKS, Kubernetes or the CDK")
        for key in ("AWS:team", "k8s.io/cluster-autoscaler/enabled", "kubernetes.io/x", "eks:y")
    ],
    (
        {
            "gpu_nodes.prefill.taints": json.dumps(
                [{"key": f"example.com/t{i}", "value": "v"} for i in range(49)]
            )
        },
        "gpu_nodes.prefill.taints",
        "EKS takes 50 per node group and this app sets 2: at most 48",
    ),
    *[
        ({"gpu_nodes.decode.labels": json.dumps({key: "x"})}, "gpu_nodes.decode.labels", why)
        for key, why in (
            ("node-role.kubernetes.io/gpu", "the kubelet refuses to set such labels"),
            ("eks.amazonaws.com/nodegroup", "belongs to Kubernetes or EKS"),
            ("k8s.io/x", "belongs to Kubernetes or EKS"),
        )
    ],
    (
        {"gpu_nodes.decode.labels": json.dumps({"example.com/" + "n" * 60: "x"})},
        f"gpu_nodes.decode.labels.example.com/{'n' * 60} (key)",
        "EKS takes node label and taint keys of at most 63",
    ),
    (
        {"gpu_nodes.decode.labels": '{"team": ""}'},
        "gpu_nodes.decode.labels.team",
        "EKS takes node label values of 1-63 characters",
    ),
    (
        {"gpu_nodes.decode.taints": '[{"key": "node.kubernetes.io/unschedulable", "value": "x"}]'},
        "gpu_nodes.decode.taints",
        "belong to Kubernetes",
    ),
    *[
        (
            {"observability.alarms.emails": json.dumps([address])},
            "observability.alarms.emails[0]",
            "not a bare e-mail address",
        )
        for address in ("On Call <oncall@example.com>", "<oncall@example.com>", "a b@example.com")
    ],
    (
        {"observability.alarms.efa_error_events_threshold": str(2**53)},
        "observability.alarms.efa_error_events_threshold",
        "the largest integer CloudFormation and the CDK carry exactly",
    ),
    *[
        (
            {"observability.alarms.ttft_p95_objective_seconds": value},
            "observability.alarms.ttft_p95_objective_seconds",
            "finite number",
        )
        for value in ("nan", "inf", "-inf")
    ],
    ({"serving.model.id": "org/model--v2"}, "serving.model.id", "validate_repo_id"),
    ({"serving.model.id": "org/" + "m" * 97}, "serving.model.id", "at most 96 characters"),
    (
        {"observability.alarms.node_shortfall_minutes": "10"},
        "observability.alarms.node_shortfall_minutes",
        "shorter than cluster.node_autoscaler.max_node_provision_minutes (20)",
    ),
    (
        {
            "cluster.node_autoscaler.max_node_provision_minutes": "45",
            "observability.alarms.node_shortfall_minutes": "45",
        },
        "observability.alarms.capacity_shortfall_minutes",
        "the alarm would page during a normal scale-up; use at least 45",
    ),
    *[
        ({"serving.model.s3_uri": f"s3://{bucket}/qwen"}, "serving.model.s3_uri", why)
        for bucket, why in (
            ("my..models", "two adjacent periods"),
            ("192.168.10.5", "formatted as an IP address"),
            ("xn--models", "which S3 reserves"),
            ("models-s3alias", "which S3 reserves"),
        )
    ],
    (
        {"cluster.admin_principal_arns": "arn:aws:iam::123456789012:role/" + "r" * 65},
        "cluster.admin_principal_arns",
        "a name of 1-64 letters",
    ),
    (
        {"cluster.operator_principal_arns": "arn:aws-us-gov:iam::123456789012:role/Ops"},
        "cluster.operator_principal_arns[0]",
        "a cluster in us-west-2 takes principals of aws",
    ),
    # The configuration's own syntax.
    (
        {"network.availability_zones": "[usw2-az1, usw2-az2"},
        "network.availability_zones",
        "not valid YAML",
    ),
    ({"tags": '{"a": "1", "a": "2"}'}, "tags", "key 'a' appears twice"),
    ({"network..nat_gateways": "1"}, "network..nat_gateways", "is not a setting name"),
    ({"region.name": "x"}, "region.name", "region is a single value, not a section"),
    # Issue 22: two groups on one reservation are checked together.
    (
        {
            "network.gpu_availability_zone": "usw2-az1",
            **{
                f"gpu_nodes.{side}.capacity": json.dumps(
                    {
                        "type": "capacity_reservation",
                        "reservation_id": "cr-0123456789abcdef0",
                        "reserved_instances": 3,
                    }
                )
                for side in ("prefill", "decode")
            },
        },
        "gpu_nodes",
        "can grow to 4 together",
    ),
    (
        {
            "network.gpu_availability_zone": "usw2-az1",
            "gpu_nodes.decode.instance_type": "p5e.48xlarge",
            **{
                f"gpu_nodes.{side}.capacity": json.dumps(
                    {
                        "type": "capacity_block",
                        "reservation_id": "cr-0123456789abcdef0",
                        "reserved_instances": 4,
                    }
                )
                for side in ("prefill", "decode")
            },
        },
        "gpu_nodes",
        "a reservation holds one instance type",
    ),
    (
        {
            "gpu_nodes.decode.capacity": json.dumps(
                {
                    "type": "capacity_block",
                    "reservation_id": "cr-0123456789abcdef0",
                    "reserved_instances": 2,
                }
            )
        },
        "network.gpu_availability_zone",
        "required with reserved capacity",
    ),
    # Mistakes that would silently do something else: a top-level typo.
    ({"regoin": "eu-west-1"}, "regoin", "did you mean 'region'"),
    ({"prefx": "team-a"}, "prefx", "did you mean 'prefix'"),
]


@pytest.mark.parametrize(("overrides", "setting", "fragment"), INVALID)
def test_invalid_setting_is_named_and_nothing_is_synthesized(
    overrides: dict[str, str], setting: str, fragment: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as raised:
        app.build({**cdk_json_context(), **overrides}, outdir=str(tmp_path))
    paths = [problem.path for problem in raised.value.problems]
    assert setting in paths, str(raised.value)
    assert fragment in str(raised.value)
    assert not list(tmp_path.glob("*.template.json"))


def test_every_problem_is_reported_at_once() -> None:
    """Unknown keys, section errors, missing fields and checks across valid sections, together."""
    context = {
        **cdk_json_context(),
        "regoin": "eu-west-1",
        "cluster.bogus": "1",
        "cluster.system_nodes.disk_size_gib": "8",
        "gpu_nodes.decode.taints": '[{"value": "x"}]',
        "network.vpc_cidr": "10.0.0.0/24",
        "observability.alarms.emails": "On Call <oncall@example.com>",
    }
    with pytest.raises(ConfigError) as raised:
        load_settings(context)
    assert {p.path for p in raised.value.problems} == {
        "regoin",
        "cluster.bogus",
        "cluster.system_nodes.disk_size_gib",
        "gpu_nodes.decode.taints[0].key",  # a missing field
        "network.vpc_cidr",  # a relation whose settings are valid still runs
        "observability.alarms.emails[0]",
    }
    assert len(str(raised.value).splitlines()) == 1 + len(raised.value.problems)


def test_a_relation_is_skipped_while_one_of_its_settings_is_invalid() -> None:
    """The zones are not judged against a region that is itself wrong: one problem, not a
    cascade."""
    with pytest.raises(ConfigError) as raised:
        load_settings({**cdk_json_context(), "region": "mars-1"})
    assert [p.path for p in raised.value.problems] == ["region"]


def test_a_single_problem_is_one_line() -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({**cdk_json_context(), "serving.model.id": "Qwen/Qwen3-32B\n"})
    assert str(raised.value).count("\n") == 0
    assert str(raised.value).startswith("Invalid configuration: serving.model.id = ")


@pytest.mark.parametrize("region", ["eu-west-1", "us-east-1", "us-west-1", "ap-northeast-1"])
def test_switching_region_needs_no_zones(region: str) -> None:
    settings = load_settings({**cdk_json_context(), "region": region}, {})
    assert settings.network.availability_zones == default_zone_ids(region)
    assert settings.network.gpu_availability_zone == default_zone_ids(region)[0]


def test_derived_zones_are_zones_eks_accepts() -> None:
    from catalog.regions import EKS_UNSUPPORTED_ZONE_IDS, REGIONS, zone_belongs_to_region

    for region in REGIONS:
        zones = default_zone_ids(region)
        assert len(set(zones)) == 2
        assert all(zone_belongs_to_region(zone, region) for zone in zones), region
        assert not set(zones) & EKS_UNSUPPORTED_ZONE_IDS, region


def test_given_zones_of_another_region_say_they_can_be_left_out() -> None:
    context = {
        **cdk_json_context(),
        "region": "eu-west-1",
        "network.availability_zones": '["usw2-az1", "usw2-az2"]',
    }
    with pytest.raises(ConfigError, match=r"leave network\.availability_zones out"):
        load_settings(context, {})


def test_the_gpu_zone_defaults_to_the_first_given_zone() -> None:
    context = {**cdk_json_context(), "network.availability_zones": '["usw2-az3", "usw2-az1"]'}
    assert load_settings(context, {}).network.gpu_availability_zone == "usw2-az3"


@pytest.mark.parametrize(
    ("key", "value", "read"),
    [
        (
            "cluster.admin_principal_arns",
            "arn:aws:iam::123456789012:role/Admins",
            lambda s: s.cluster.admin_principal_arns,
        ),
        (
            "observability.alarms.emails",
            "oncall@example.com",
            lambda s: s.observability.alarms.emails,
        ),
        (
            "gpu_nodes.decode.taints",
            '{"key": "example.com/dedicated", "value": "llm"}',
            lambda s: [t.key for t in s.gpu_nodes.decode.taints],
        ),
    ],
)
def test_a_single_value_where_a_list_is_expected_is_a_one_item_list(
    key: str, value: str, read: object
) -> None:
    settings = load_settings({**cdk_json_context(), key: value}, {})
    (item,) = read(settings)
    assert item in value


def test_two_groups_on_one_reservation_that_fit_it_together_are_accepted() -> None:
    capacity = json.dumps(
        {"type": "capacity_reservation", "reservation_id": "cr-0123456789abcdef0",
         "reserved_instances": 4}
    )  # fmt: skip
    context = {
        **cdk_json_context(),
        "network.gpu_availability_zone": "usw2-az2",
        "gpu_nodes.prefill.capacity": capacity,
        "gpu_nodes.decode.capacity": capacity,
    }
    settings = load_settings(context, {})
    groups = settings.gpu_nodes.groups().values()
    assert sum(group.scaling.max_size for group in groups) <= 4


def test_yaml_file_overrides_cdk_json_and_flags_override_the_file(tmp_path: Path) -> None:
    config_file = tmp_path / "prod.yaml"
    config_file.write_text("network:\n  nat_gateways: 2\n  flow_log_retention_days: 30\n")
    settings = load_settings(
        {**cdk_json_context(), "config": str(config_file), "network.nat_gateways": "1"}
    )
    assert settings.network.flow_log_retention_days == 30
    assert settings.network.nat_gateways == 1
    assert settings.network.availability_zones == ["usw2-az1", "usw2-az2"]  # from cdk.json


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nope.yaml", "no such file"),
        ("tests", "is a directory"),
        ("/dev/null", "is not a regular file"),
    ],
)
def test_a_config_path_that_is_no_file_is_a_config_error_saying_what_it_is(
    path: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=rf"config = '{re.escape(path)}': {message}"):
        load_settings({**cdk_json_context(), "config": path})


def test_account_falls_back_to_cdk_default_account_only_when_unset() -> None:
    environ = {"CDK_DEFAULT_ACCOUNT": "111122223333"}
    assert load_settings(cdk_json_context(), environ).account == "111122223333"
    explicit = {**cdk_json_context(), "account": "444455556666"}
    assert load_settings(explicit, environ).account == "444455556666"


def test_cdk_internal_context_keys_are_not_mistaken_for_settings() -> None:
    context = {
        **cdk_json_context(),
        "aws:cdk:enable-path-metadata": True,
        "@aws-cdk/x:y": True,
        "availability-zones:account=111122223333:region=us-west-2": ["us-west-2a"],
    }
    assert load_settings(context).region == "us-west-2"


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "tags.cost:center",
            "'cost:center' is not a setting name (a-z, 0-9 and _); give a key of tags with the "
            "map, as JSON: -c tags='{...}'",
        ),
        (
            "gpu_nodes.decode.labels.example.com/team",
            "'com/team' is not a setting name (a-z, 0-9 and _); give a key of "
            "gpu_nodes.decode.labels with the map, as JSON: -c gpu_nodes.decode.labels='{...}'",
        ),
        ("serving.model.id:x", "'id:x' is not a setting name (a-z, 0-9 and _)"),
        ("region:x", "unknown context key; did you mean 'region'?"),
    ],
)
def test_a_key_with_a_colon_under_a_setting_is_judged_not_passed_over_as_cdks(
    key: str, message: str
) -> None:
    """CDK's own keys with ':' never begin with a setting's name; these were dropped without a
    word (a tag given with -c never reached a resource)."""
    with pytest.raises(ConfigError) as raised:
        load_settings({**cdk_json_context(), key: "x"})
    (problem,) = [p for p in raised.value.problems if p.path == key]
    assert problem.message.startswith(message)


HOSTILE_CLI_INPUTS = [
    ({"network.gpu_availability_zone": "usw2-az9"}, "network.gpu_availability_zone = 'usw2-az9'"),
    ({"serving.model.id": "Qwen/Qwen3-32B\n"}, "serving.model.id = 'Qwen/Qwen3-32B\\n'"),
    ({"tags": '{"team": "${AWS::AccountId}"}'}, "tags = "),
    ({"serving.model.id": "Qwen/Qw\u0435n3-32B"}, "'\\u0435' (cyrillic small letter ie)"),
    ({"config": "no-such.yaml"}, "config = 'no-such.yaml': no such file"),
]


@pytest.mark.parametrize(("overrides", "shown"), HOSTILE_CLI_INPUTS)
def test_cli_reports_bad_input_in_one_line_without_a_traceback(
    overrides: dict[str, str], shown: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """app.py's main with each input, in this process: the error leaves as SystemExit with one
    line (Python prints it and exits 1, no traceback) before any template is written. The test
    below runs the real CLI path once."""
    context = {**cdk_json_context(), **overrides}
    build = app.build
    monkeypatch.setattr(app, "build", lambda: build(context, outdir=str(tmp_path)))
    with pytest.raises(SystemExit) as exited:
        app.main()
    message = exited.value.code
    assert isinstance(message, str)
    assert shown in message
    assert message.strip().count("\n") == 0, message
    assert not list(tmp_path.glob("*.template.json"))


def test_the_cli_prints_bad_input_in_one_line_and_exits_1(tmp_path: Path) -> None:
    """The user-facing path: `cdk synth -c ...` runs app.py with CDK_CONTEXT_JSON."""
    overrides, shown = HOSTILE_CLI_INPUTS[0]
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=PROJECT_ROOT,
        env={
            "CDK_CONTEXT_JSON": json.dumps({**cdk_json_context(), **overrides}),
            "CDK_OUTDIR": str(tmp_path),
            "PATH": str(Path(sys.executable).parent),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert shown in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_one_setting_inside_a_section_keeps_the_sections_other_defaults() -> None:
    """The docs' own upgrade step: one number changes, the rest of the default scaling stays."""
    settings = load_settings({**cdk_json_context(), "gpu_nodes.decode.scaling.max_size": "3"})
    scaling = settings.gpu_nodes.decode.scaling
    default = load_settings(cdk_json_context()).gpu_nodes.decode.scaling
    assert (scaling.min_size, scaling.desired_size, scaling.max_size) == (
        default.min_size,
        default.desired_size,
        3,
    )


def test_no_message_only_quotes_a_regular_expression() -> None:
    """Every pattern field states its rule in words (json_schema_extra "rule")."""
    from app_config import Settings

    def pattern_fields(model: type, path: str = "") -> list[str]:
        found = []
        for name, field in model.model_fields.items():
            if any(getattr(m, "pattern", None) for m in field.metadata):
                assert isinstance(field.json_schema_extra, dict), f"{path}{name}"
                assert field.json_schema_extra.get("rule"), f"{path}{name}"
                found.append(f"{path}{name}")
            annotation = field.annotation
            for candidate in (annotation, *getattr(annotation, "__args__", ())):
                if isinstance(candidate, type) and hasattr(candidate, "model_fields"):
                    found += pattern_fields(candidate, f"{path}{name}.")
        return found

    assert len(pattern_fields(Settings)) >= 8


@pytest.mark.parametrize("configuration", ["default", "public-endpoint", "reserved-capacity"])
def test_every_relation_reads_only_the_settings_it_declares(configuration: str) -> None:
    """The loader runs a relation when its declared settings are valid, whatever the others
    hold: one that reads an undeclared setting would see a default, or crash."""
    from app_config.model import Settings
    from app_config.rules import rules
    from tests.configurations import settings_for

    settings = settings_for(configuration)
    for rule in rules():
        needs, check = rule.reads, rule.findings
        partial = Settings.model_construct()
        for name in needs:
            object.__setattr__(partial, name, getattr(settings, name))
        for name in set(Settings.model_fields) - needs:
            partial.__dict__.pop(name, None)
        assert check(partial) == check(settings)


def test_pdctl_prints_a_configuration_problem_as_typed() -> None:
    """pdctl shares the loader; what a problem quotes from the user ("[/x]") is text, not
    terminal markup that would crash the printer."""
    from typer.testing import CliRunner

    from pdctl.cli import app as pdctl

    result = CliRunner().invoke(pdctl, ["cost", "-c", 'tags={"team": "[/x]"}'])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "[/x]" in result.output


# The pinned CDK CLI's bootstrap template (package.json pins aws-cdk; `npm ci` installs it).
BOOTSTRAP_TEMPLATE = PROJECT_ROOT / "node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml"


def _bootstrap_qualifier_parameter() -> dict[str, str]:
    text = BOOTSTRAP_TEMPLATE.read_text()
    lines = text.split("\n  Qualifier:\n", 1)[1].splitlines()
    fields: dict[str, str] = {}
    for line in lines:
        if not line.startswith("    "):
            break
        key, _, value = line.strip().partition(": ")
        if not key.startswith("#"):
            fields[key] = value.strip('"')
    return fields


# S3 general purpose bucket names: 3-63 lowercase letters, digits, '.' and '-', beginning and
# ending with a letter or digit (S3 user guide, "General purpose bucket naming rules"); ECR
# repository names: lowercase components joined by '.', '_' or '-' (ECR API reference,
# CreateRepository repositoryName).
S3_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
ECR_REPOSITORY_NAME = re.compile(r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*")


def _template_names(template: str, qualifier: str) -> str:
    """A name the bootstrap template writes (its Fn::Sub), for a 12-digit account in the
    longest-named region."""
    return (
        template.replace("${Qualifier}", qualifier)
        .replace("${AWS::AccountId}", "123456789012")
        .replace("${AWS::Region}", "ap-southeast-5")
    )


@pytest.mark.parametrize(
    "qualifier",
    [
        *("pdllm", "a", "a1-b-2", "abcdefghij", "abcdefghijk", "pd.llm", "pd llm", ""),
        *("ABC", "a_b", "-a", "a-", "a--b"),
    ],
)
def test_bootstrap_qualifier_follows_the_bootstrap_templates_rule(qualifier: str) -> None:
    """A qualifier the app accepts is one `cdk bootstrap --qualifier` accepts (its template's
    AllowedPattern) and bootstraps with: the bucket and the ECR repository the template names
    after it are valid names. The default itself is the shared bootstrap."""
    import aws_cdk

    from app_config.model import DEFAULT_BOOTSTRAP_QUALIFIER

    parameter = _bootstrap_qualifier_parameter()
    assert parameter["Default"] == DEFAULT_BOOTSTRAP_QUALIFIER
    assert aws_cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER == DEFAULT_BOOTSTRAP_QUALIFIER
    template = BOOTSTRAP_TEMPLATE.read_text()
    bucket = "cdk-${Qualifier}-assets-${AWS::AccountId}-${AWS::Region}"
    repository = "cdk-${Qualifier}-container-assets-${AWS::AccountId}-${AWS::Region}"
    assert bucket in template
    assert repository in template
    bootstrap_accepts = (
        re.fullmatch(parameter["AllowedPattern"], qualifier) is not None
        and S3_BUCKET_NAME.fullmatch(_template_names(bucket, qualifier)) is not None
        and ECR_REPOSITORY_NAME.fullmatch(_template_names(repository, qualifier)) is not None
    )
    context = {**cdk_json_context(), "bootstrap_qualifier": qualifier}
    if bootstrap_accepts:
        assert load_settings(context).bootstrap_qualifier == qualifier
    else:
        with pytest.raises(ConfigError, match="bootstrap_qualifier"):
            load_settings(context)
