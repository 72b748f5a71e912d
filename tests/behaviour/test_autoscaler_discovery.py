"""The app's Cluster Autoscaler resizes this deployment's node groups and no other: on an
existing cluster, the owner's managed node groups carry the same EKS tags as the app's, and only
the deployment's tag, which the app puts on its own groups' Auto Scaling groups, tells them
apart. Discovery and IAM are walked with the values and policies the app synthesizes, through
the rules of the systems that decide (tests/autoscaler_discovery_model.py)."""

from __future__ import annotations

import json

import pytest

from app_config.autoscaler_discovery import (
    CLUSTER_NAME_TAG,
    DEPLOYMENT_TAG,
    ENABLED_TAG,
    cluster_tag,
)
from constructs.cluster.cluster_autoscaler import WRITES
from constructs.common.auto_scaling_group import NODEGROUP_NAME_TAG
from tests.autoscaler_discovery_model import (
    discovered_groups,
    discovery_spec,
    write_allowed,
)
from tests.conftest import Synthesized, cfn_text

CONFIGURATIONS = ["existing-cluster", "default", "trial-one-node"]


@pytest.fixture(scope="module", params=CONFIGURATIONS)
def app(request, synthesize) -> Synthesized:
    return synthesize(request.param)


def _autoscaler_values(app: Synthesized) -> dict:
    (chart,) = [
        c
        for c in app.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values()
        if c["Properties"]["Chart"] == "cluster-autoscaler"
    ]
    return json.loads(cfn_text(chart["Properties"]["Values"]))


def _eks_tags(cluster: str, nodegroup: str) -> dict[str, str]:
    """What EKS puts on every managed node group's Auto Scaling group (EKS user guide, 'Managed
    node groups'; the eks: tags as the Auto Scaling console shows them)."""
    return {
        CLUSTER_NAME_TAG: cluster,
        NODEGROUP_NAME_TAG: nodegroup,
        ENABLED_TAG: "true",
        cluster_tag(cluster): "owned",
    }


def _tags_written(app: Synthesized) -> list[dict]:
    """Each CreateOrUpdateTags call the app's custom resources make, with the node group it
    names (the Auto Scaling group it tags is that node group's, read from DescribeNodegroup)."""
    calls = []
    for role in ("cluster", "gpu-nodes"):
        for resource in app.resources(role, "Custom::AWS").values():
            text = cfn_text(resource["Properties"].get("Update", ""))
            if '"action":"CreateOrUpdateTags"' in text:
                calls.append(json.loads(text.replace("<token>", "TOKEN")))
    return calls


def _groups(app: Synthesized) -> dict[str, dict[str, str]]:
    """The cluster's Auto Scaling groups after a deploy: two of the owner's, and the app's
    (the system group and each GPU group) with the tag each DeploymentTag wrote."""
    cluster = app.settings.cluster_name
    groups = {
        "owner-general": _eks_tags(cluster, "owner-general"),
        "owner-gpu": _eks_tags(cluster, "owner-gpu"),
    }
    nodegroups = [
        *app.resources("cluster", "AWS::EKS::Nodegroup"),
        *app.resources("gpu-nodes", "AWS::EKS::Nodegroup"),
    ]
    written = {
        (tag["ResourceType"], tag["Key"], tag["Value"])
        for call in _tags_written(app)
        for tag in call["parameters"]["Tags"]
    }
    assert len(_tags_written(app)) == len(nodegroups)  # one per node group the app creates
    ((resource_type, key, value),) = written
    assert resource_type == "auto-scaling-group"
    for nodegroup in nodegroups:
        groups[nodegroup] = {**_eks_tags(cluster, nodegroup), key: value}
    return groups


def test_the_autoscaler_discovers_the_deployments_groups_and_none_of_the_owners(app) -> None:
    spec = discovery_spec(_autoscaler_values(app))
    groups = _groups(app)
    assert discovered_groups(spec, groups) == {name for name in groups if name[:5] != "owner"}


def test_with_the_charts_default_tags_it_would_resize_the_owners_groups_too(app) -> None:
    """Why the deployment's tag is there: EKS's two tags alone match every managed group."""
    values = _autoscaler_values(app)
    default = {**values["autoDiscovery"]}
    default.pop("tags")
    groups = _groups(app)
    assert discovered_groups(discovery_spec({"autoDiscovery": default}), groups) == set(groups)


def _write_statements(app: Synthesized) -> list[dict]:
    return [
        statement
        for policy in app.resources("cluster", "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if set(WRITES) & set(statement["Action"] if isinstance(statement["Action"], list) else [])
    ]


def test_iam_refuses_its_writes_on_a_group_the_deployment_did_not_create(app) -> None:
    """Even a wider discovery (a hand-edited flag) could not resize an owner's group."""
    (statement,) = _write_statements(app)
    groups = _groups(app)
    allowed = {name for name, tags in groups.items() if write_allowed(statement, tags)}
    assert allowed == {name for name in groups if name[:5] != "owner"}


def test_the_tag_is_the_deployments_own(app) -> None:
    for call in _tags_written(app):
        (tag,) = call["parameters"]["Tags"]
        assert (tag["Key"], tag["Value"]) == (DEPLOYMENT_TAG, app.settings.prefix)
