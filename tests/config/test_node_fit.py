"""Node fit (app_config/rules/node_fit.py) and the allocatable it judges by
(catalog/node_allocatable.py): each rule once, as a table, and the AMI's formula against the
figures its source gives."""

from __future__ import annotations

import pytest

from app_config import ConfigError
from app_config.rules import evaluate
from app_config.rules import node_fit as rule
from catalog import cluster_pods
from catalog.instances import CATALOG
from catalog.node_allocatable import ENI_LIMITS, node_allocatable
from serving_manifests import rayservice
from serving_manifests.serve_extensions import render_serve_extensions
from tests.configurations import CONFIGURATIONS, render_deployed, settings_for

# nodeadm's kube-reserved CPU by range (6 %, 1 %, 0.5 % x 2, 0.25 % above 4 cores), memory
# 11 MiB x maxPods + 255, maxPods = ENIs x (IPs - 1) + 2 under the managed node group's cap.
# (instance type, maxPods, kube-reserved CPU m, kube-reserved memory MiB)
ALLOCATABLE = [
    ("m7i.large", 3 * 9 + 2, 60 + 10, 11 * 29 + 255),
    ("m7i.xlarge", 4 * 14 + 2, 60 + 10 + 10, 11 * 58 + 255),
    ("m7i.2xlarge", 4 * 14 + 2, 60 + 10 + 10 + 10, 11 * 58 + 255),
    ("p5.48xlarge", 2 * 49 + 2, 60 + 10 + 10 + 470, 11 * 100 + 255),
    ("p4d.24xlarge", 250, 60 + 10 + 10 + 230, 11 * 250 + 255),  # 15 x 49 + 2, capped
    ("m6i.4xlarge", 110, 60 + 10 + 10 + 30, 11 * 110 + 255),  # 8 x 29 + 2, capped below 30
]


@pytest.mark.parametrize(("instance_type", "max_pods", "cpu", "memory"), ALLOCATABLE)
def test_allocatable_follows_the_al2023_amis_reservations(
    instance_type: str, max_pods: int, cpu: int, memory: int
) -> None:
    node = node_allocatable(instance_type)
    assert node is not None
    assert (node.max_pods, node.kube_reserved_cpu_millis, node.kube_reserved_memory_mib) == (
        max_pods,
        cpu,
        memory,
    )
    assert node.cpu_millis == node.vcpus * 1000 - cpu
    assert node.memory_mib == node.memory_gib * 1024 - memory - 100  # evictionHard 100Mi


def test_huge_pages_leave_allocatable_memory() -> None:
    plain, with_pages = node_allocatable("p5.48xlarge"), node_allocatable("p5.48xlarge", 5120)
    assert plain
    assert with_pages
    assert plain.memory_mib - with_pages.memory_mib == 5120


def test_every_gpu_type_of_the_catalog_has_eni_limits() -> None:
    assert set(CATALOG) <= set(ENI_LIMITS)


def test_a_type_outside_the_catalog_has_no_allocatable() -> None:
    assert node_allocatable("t3.xlarge") is None


def _found(configuration: str, overrides: dict[str, str], code: str) -> list[tuple[str, str]]:
    """The findings of ``code``: an error stops the loader, a warning is evaluated."""
    try:
        settings = settings_for(configuration, **overrides)
    except ConfigError as error:
        return [(p.path, str(p)) for p in error.problems if p.code == code]
    return [(f.path, str(f)) for f in evaluate(settings) if f.code == code]


# (configuration, overrides, what to patch, code, setting named, a fragment of the message);
# the warnings a configuration alone raises are rows of tests/config/test_rules.py.
FINDINGS = [
    (
        "default",
        {"cluster.system_nodes.instance_type": "m7i.large"},
        {},
        "node-fit",
        "cluster.system_nodes.instance_type",
        "Ray head pod",
    ),
    (
        "default",
        {},
        {(rayservice, "RESERVED_VCPUS"): 0},  # the worker asks for every vCPU
        "node-fit",
        "gpu_nodes.prefill.instance_type",
        "CPU 192",
    ),
    (
        "default",
        {},
        {
            (cluster_pods, "DEPLOYMENTS"): (
                cluster_pods.ClusterPod("big-operator", "system", 3000, 0, "test", replicas=4),
            )
        },
        "node-fit",
        "cluster.system_nodes.scaling.max_size",
        "do not fit 4",
    ),
    (
        "default",
        {"cluster.system_nodes.scaling": '{"min_size": 0, "desired_size": 0, "max_size": 2}'},
        {},
        "system-nodes-empty",
        "cluster.system_nodes.scaling.min_size",
        "nothing can scale it up",
    ),
    (
        "existing-cluster",  # the app installs the Cluster Autoscaler there too
        {"cluster.system_nodes.scaling": '{"min_size": 0, "desired_size": 1, "max_size": 2}'},
        {},
        "system-nodes-empty",
        "cluster.system_nodes.scaling.min_size",
        "Use at least 1",
    ),
    (
        "quickstart",
        {},
        {(rayservice, "MEMORY_REQUEST_SHARE"): 0.96},  # within nominal, above the estimate
        "node-fit-headroom",
        "gpu_nodes.prefill.instance_type",
        "Karpenter's 7.5 % estimate",
    ),
]


@pytest.mark.parametrize(
    ("configuration", "overrides", "patches", "code", "path", "words"), FINDINGS
)
def test_a_node_group_its_pods_do_not_fit_is_named(
    monkeypatch, configuration, overrides, patches, code, path, words
) -> None:
    for (module, name), value in patches.items():
        monkeypatch.setattr(module, name, value)
    if (cluster_pods, "DEPLOYMENTS") in patches:
        monkeypatch.setattr(rule, "DEPLOYMENTS", patches[(cluster_pods, "DEPLOYMENTS")])
    found = _found(configuration, overrides, code)
    assert any(p == path and words in message for p, message in found), found


def test_an_owners_autoscaler_may_scale_the_system_nodes_from_zero() -> None:
    """With the owner's Cluster Autoscaler (not installed by the app) the group at 0 is the
    owner's to scale up: the rule has nothing to say."""
    overrides = {
        "cluster.existing.addons.cluster_autoscaler": '{"source": "installed", "version": '
        '"1.35.2"}',
        "cluster.system_nodes.scaling": '{"min_size": 0, "desired_size": 1, "max_size": 2}',
    }
    settings = settings_for("existing-cluster", **overrides)
    assert [f for f in evaluate(settings) if f.code == "system-nodes-empty"] == []


@pytest.mark.parametrize("configuration", ["default", "quickstart", "trial-g6e", "deepseek-v3-pd"])
def test_the_shipped_shapes_fit_their_nodes(configuration: str) -> None:
    findings = evaluate(settings_for(configuration))
    assert [str(f) for f in findings if f.code.startswith("node-fit")] == []


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_the_rule_judges_the_deployed_pods(configuration: str) -> None:
    """The rule renders the Ray cluster without the Serve config (it sets no request), without
    the GCS store and with a stand-in account: the pods it judges are the deployed RayService's."""
    settings = settings_for(configuration)
    assert rule.rendered_pods(settings) == rule.pods_of(render_deployed(settings).rayservice)


def test_the_rule_reads_the_requests_the_renderer_writes() -> None:
    settings = settings_for("default")
    service = rayservice.render_rayservice(settings, {}, render_serve_extensions(settings))
    worker = service["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    (container,) = worker["containers"]
    pods = rule.rendered_pods(settings)
    assert (
        pods.workers["prefill"].cpu_millis == int(container["resources"]["requests"]["cpu"]) * 1000
    )
