"""Composes the stacks in deployment order; app.py and the tests share this one wiring."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import App, Stack, Tags

from app_config import Settings
from constructs.common.checkov_skips import skip_singleton_provider_checks
from stacks.cluster_stack import ClusterStack
from stacks.common import apply_log_retention_policy, environment, synthesizer
from stacks.findings import report_warnings
from stacks.gpu_nodes_stack import GpuNodesStack
from stacks.network_stack import NetworkStack
from stacks.observability_stack import ObservabilityStack
from stacks.serving_stack import ServingStack


@dataclass(frozen=True)
class Stacks:
    network: NetworkStack
    cluster: ClusterStack
    gpu_nodes: GpuNodesStack
    serving: ServingStack
    observability: ObservabilityStack

    def all(self) -> list[Stack]:
        """In deployment order."""
        return [self.network, self.cluster, self.gpu_nodes, self.serving, self.observability]

    def by_role(self, role: str) -> Stack:
        """The stack of a role as settings.stack_name names it (network, gpu-nodes, ...)."""
        return getattr(self, role.replace("-", "_"))


def build_stacks(app: App, settings: Settings) -> Stacks:
    env = environment(settings)
    network = NetworkStack(
        app,
        settings.stack_name("network"),
        settings=settings,
        env=env,
        synthesizer=synthesizer(settings),
        description="VPC, endpoints and flow logs for disaggregated LLM serving",
    )
    cluster = ClusterStack(
        app,
        settings.stack_name("cluster"),
        settings=settings,
        vpc=network.network.vpc,
        env=env,
        synthesizer=synthesizer(settings),
        description="EKS cluster, system nodes and add-ons for disaggregated LLM serving",
    )
    gpu_nodes = GpuNodesStack(
        app,
        settings.stack_name("gpu-nodes"),
        settings=settings,
        vpc=network.network.vpc,
        gpu_subnets=network.network.gpu_subnets,
        cluster=cluster.control_plane.cluster,
        node_role=cluster.node_role.role,
        topic=cluster.alarm_topic.topic,
        env=env,
        synthesizer=synthesizer(settings),
        description="EFA GPU node groups (prefill, decode) for disaggregated LLM serving",
    )
    serving = ServingStack(
        app,
        settings.stack_name("serving"),
        settings=settings,
        cluster=cluster.control_plane.cluster,
        gpu_placements=settings.gpu_nodes.placements(),
        env=env,
        synthesizer=synthesizer(settings),
        description="Device plugins and the prefill/decode Ray service on the cluster",
    )
    observability = ObservabilityStack(
        app,
        settings.stack_name("observability"),
        settings=settings,
        cluster=cluster.control_plane.cluster,
        topic=cluster.alarm_topic.topic,
        node_group_alarms=gpu_nodes.capacity_alarms,
        env=env,
        synthesizer=synthesizer(settings),
        description="Prometheus metrics, alert rules, dashboard and health alarms for "
        "disaggregated LLM serving",
    )
    # After the network: a created VPC is referenced anyway, but an existing one is imported
    # by literal ids, and the nodes may need the endpoints the network stack adds to it.
    cluster.add_stack_dependency(network)
    # Deleted before the GPU nodes: the Ray pods drain while their nodes still exist.
    serving.add_stack_dependency(gpu_nodes)
    # The scraper reads the RayService's pods; its alert rules are about them.
    observability.add_stack_dependency(serving)
    stacks = Stacks(
        network=network,
        cluster=cluster,
        gpu_nodes=gpu_nodes,
        serving=serving,
        observability=observability,
    )
    report_warnings(stacks, settings)
    for stack in stacks.all():
        skip_singleton_provider_checks(stack)
        apply_log_retention_policy(stack, settings)
    for key, value in settings.tags.items():
        # A placement group's tags are create-only: a tag change would replace the group and,
        # through the launch templates that name it, roll every GPU node.
        Tags.of(app).add(key, value, exclude_resource_types=["AWS::EC2::PlacementGroup"])
    return stacks
