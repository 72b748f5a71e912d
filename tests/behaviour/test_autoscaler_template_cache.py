"""A GPU group whose first node was seen half-started still scales from zero later: the
Cluster Autoscaler's GPU readiness and template cache (tests/autoscaler_template_model.py, CA
1.35.2) walked with the node group labels, tags and autoscaler flags the app synthesizes."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest

from app_config.node_labels import ACCELERATOR_LABEL, EFA_RESOURCE, GPU_RESOURCE, GPU_ROLES
from tests.autoscaler_template_model import (
    DEFAULT_CACHE_EXPIRY,
    RealNode,
    TemplateCache,
    duration,
    gpu_ready,
)
from tests.conftest import Synthesized, cfn_text
from tests.node_fit_model import TemplateNode, template_node, unfit_reasons

MINUTE = timedelta(minutes=1)


@pytest.fixture(scope="module")
def app(synthesize) -> Synthesized:
    return synthesize("default")


def _nodegroup(app: Synthesized, role: str) -> dict:
    (props,) = [
        ng["Properties"]
        for ng in app.resources("gpu-nodes", "AWS::EKS::Nodegroup").values()
        if ng["Properties"]["Labels"].get("llm-serving/role") == role
    ]
    return props


def _provider_template(app: Synthesized, role: str) -> TemplateNode:
    instance = app.settings.gpu_nodes.groups()[role].instance
    return template_node(
        role, _nodegroup(app, role), instance.vcpus, instance.memory_gib, instance.gpus
    )


def _cache_expiry(app: Synthesized) -> timedelta:
    (chart,) = [
        c
        for c in app.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values()
        if c["Properties"]["Chart"] == "cluster-autoscaler"
    ]
    values = json.loads(cfn_text(chart["Properties"]["Values"]).replace("<token>", "TOKEN"))
    flag = values["extraArgs"].get("node-info-cache-expire-time")
    return duration(flag) if flag else DEFAULT_CACHE_EXPIRY


def _starting_node(template: TemplateNode, *missing: str) -> RealNode:
    """A real node of the group, Ready, before the device plugins named by ``missing`` ran."""
    allocatable = {k: v for k, v in template.allocatable.items() if k not in missing}
    return RealNode(replace(template, allocatable=allocatable), ready_since=timedelta(0))


def _without_gpu_label(node: RealNode) -> RealNode:
    labels = {k: v for k, v in node.node.labels.items() if k != ACCELERATOR_LABEL}
    return replace(node, node=replace(node.node, labels=labels))


def _worker(app: Synthesized, role: str) -> dict:
    groups = app.manifests.rayservice["spec"]["rayClusterConfig"]
    (group,) = [g for g in groups["workerGroupSpecs"] if g["groupName"] == role]
    return group["template"]["spec"]


def _fits_after_the_group_empties(
    cache: TemplateCache, node: RealNode, pod: dict, minutes_seen: int, minutes_empty: int
) -> list[bool]:
    """The node runs ``minutes_seen`` minutes, the group then stays empty; per empty minute,
    whether the pending worker fits the group's template."""
    for minute in range(minutes_seen):
        cache.loop([node], minute * MINUTE)
    start = minutes_seen * MINUTE
    return [
        not unfit_reasons(pod, cache.loop([], start + minute * MINUTE))
        for minute in range(minutes_empty)
    ]


@pytest.mark.parametrize("role", GPU_ROLES)
def test_gpu_nodes_carry_the_autoscalers_gpu_label(app, role) -> None:
    labels = _nodegroup(app, role)["Labels"]
    instance = app.settings.gpu_nodes.groups()[role].instance
    assert labels[ACCELERATOR_LABEL] == f"nvidia-{instance.gpu_model.lower()}"


@pytest.mark.parametrize("role", GPU_ROLES)
def test_a_node_before_its_gpu_device_plugin_is_not_ready_for_the_autoscaler(app, role) -> None:
    """So a pod waiting for that node does not buy a second one."""
    node = _starting_node(_provider_template(app, role), GPU_RESOURCE)
    assert not gpu_ready(node, ACCELERATOR_LABEL)
    # Without the label CA would call it ready.
    assert gpu_ready(_without_gpu_label(node), ACCELERATOR_LABEL)


@pytest.mark.parametrize("role", GPU_ROLES)
def test_a_group_first_seen_without_gpus_still_scales_from_zero(app, role) -> None:
    template, pod = _provider_template(app, role), _worker(app, role)
    node = _starting_node(template, GPU_RESOURCE)
    cache = TemplateCache(template, ACCELERATOR_LABEL, _cache_expiry(app))
    assert all(_fits_after_the_group_empties(cache, node, pod, 5, 60))
    # The model can say no: the same node without the label poisons the cache for CA's default.
    blind = TemplateCache(template, ACCELERATOR_LABEL, DEFAULT_CACHE_EXPIRY)
    assert not any(_fits_after_the_group_empties(blind, _without_gpu_label(node), pod, 5, 60))


@pytest.mark.parametrize("role", GPU_ROLES)
def test_a_group_first_seen_without_efa_devices_scales_from_zero_once_the_cache_expires(
    app, role
) -> None:
    """The GPU label cannot cover EFA (CA knows no EFA readiness): the cache expiry does."""
    template, pod = _provider_template(app, role), _worker(app, role)
    assert template.allocatable[EFA_RESOURCE] > Decimal(0)
    node = _starting_node(template, EFA_RESOURCE)
    expiry = _cache_expiry(app)
    assert expiry <= timedelta(minutes=30)
    fits = _fits_after_the_group_empties(
        TemplateCache(template, ACCELERATOR_LABEL, expiry), node, pod, 5, 60
    )
    first = fits.index(True)
    assert first * MINUTE <= expiry + MINUTE
    assert all(fits[first:])
    never = _fits_after_the_group_empties(
        TemplateCache(template, ACCELERATOR_LABEL, DEFAULT_CACHE_EXPIRY), node, pod, 5, 60
    )
    assert not any(never)  # CA's default: no scale-up until it restarts
