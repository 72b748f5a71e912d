"""The EFA and NVIDIA device plugins reach exactly the GPU nodes, whatever their taints."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from app_config.node_labels import EFA_LABEL, GPU_PRESENT_LABEL
from catalog.helm_charts import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN
from tests.conftest import Synthesized


def _charts(synthesized: Synthesized) -> dict[str, dict]:
    return {
        chart["Properties"]["Chart"]: chart["Properties"]
        for chart in synthesized.resources("serving", "Custom::AWSCDK-EKS-HelmChart").values()
    }


@pytest.mark.parametrize("configuration", ["default", "reserved-capacity"])
def test_both_plugins_tolerate_every_gpu_taint(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    synthesized = synthesize(configuration)
    taints = {
        (taint.key, taint.value, taint.effect)
        for role, group in synthesized.settings.gpu_nodes.groups().items()
        for taint in group.placement(role).taints
    }
    for chart in (EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN):
        values = json.loads(_charts(synthesized)[chart.chart]["Values"])
        tolerated = {
            (t["key"], t["value"], t["effect"])
            for t in values["tolerations"]
            if t["operator"] == "Equal"
        }
        assert taints <= tolerated, chart.chart


def test_charts_are_pinned_from_their_official_repositories(default_app: Synthesized) -> None:
    charts = _charts(default_app)
    for chart in (EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN):
        rendered = charts[chart.chart]
        assert (rendered["Repository"], rendered["Version"], rendered["Namespace"]) == (
            chart.repository,
            chart.version,
            chart.namespace,
        )


def test_nvidia_plugin_leaves_infiniband_devices_to_efa(default_app: Synthesized) -> None:
    values = json.loads(_charts(default_app)[NVIDIA_DEVICE_PLUGIN.chart]["Values"])
    assert values["mofedEnabled"] is False
    assert values["nodeSelector"] == {GPU_PRESENT_LABEL: "true"}


def test_efa_plugin_runs_only_on_efa_nodes(default_app: Synthesized) -> None:
    values = json.loads(_charts(default_app)[EFA_DEVICE_PLUGIN.chart]["Values"])
    assert values["nodeSelector"] == {EFA_LABEL: "true"}
    for role, group in default_app.settings.gpu_nodes.groups().items():
        assert group.placement(role).labels[EFA_LABEL] == "true"
