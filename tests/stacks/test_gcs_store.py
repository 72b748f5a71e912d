"""The Ray GCS store's replication group for node types whose properties differ by family; the
rest of the store is read from the public-endpoint configuration's synth
(tests/stacks/test_serving_stack.py)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from app_config.serving import GcsFaultTolerance
from constructs.serving.gcs_store import GcsStore, GcsStoreProps


def _replication_group(node_type: str) -> dict:
    stack = cdk.Stack(cdk.App(), "Store", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=["us-west-2a", "us-west-2b"],
    )
    subnets = [
        ec2.Subnet.from_subnet_attributes(
            stack, f"Subnet{n}", subnet_id=f"subnet-0123456789abcdef{n}"
        )
        for n in (1, 2)
    ]
    GcsStore(
        stack,
        "Gcs",
        GcsStoreProps(
            settings=GcsFaultTolerance(enabled=True, node_type=node_type),
            name="pd-llm",
            vpc=vpc,
            subnets=subnets,
            client_security_group_id="sg-0123456789abcdef0",
            removal_policy=cdk.RemovalPolicy.RETAIN,
        ),
    )
    resources = Template.from_stack(stack).find_resources("AWS::ElastiCache::ReplicationGroup")
    (group,) = resources.values()
    return group["Properties"]


@pytest.mark.parametrize(
    ("node_type", "tiering"),
    [("cache.r6gd.xlarge", True), ("cache.r7g.large", None), ("cache.r6g.large", None)],
)
def test_r6gd_nodes_enable_data_tiering_as_elasticache_requires(node_type, tiering) -> None:
    """CloudFormation refuses a replication group of r6gd nodes without DataTieringEnabled
    true, and data tiering on any other family."""
    assert _replication_group(node_type).get("DataTieringEnabled") is tiering
