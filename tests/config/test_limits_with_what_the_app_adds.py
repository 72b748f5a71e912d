"""Limits AWS applies at deploy time, counted with what the app itself adds: the configuration's
room for user tags and taints is checked against the synthesized templates, not assumed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app_config.aws_tags import TAGS_ADDED_BY_APP, TAGS_PER_RESOURCE
from app_config.kubernetes_names import EKS_TAINTS_PER_NODE_GROUP
from tests.configurations import settings_for
from tests.conftest import Synthesized


def _tag_sets(resource: dict[str, Any]) -> Iterator[list[str]]:
    """The tag keys of a resource, and of each kind of resource its launch template tags."""
    properties = resource.get("Properties", {})
    tags = properties.get("Tags")
    if isinstance(tags, list):
        yield [tag["Key"] for tag in tags]
    elif isinstance(tags, dict):  # EKS node groups and clusters take a map
        yield list(tags)
    for specification in properties.get("LaunchTemplateData", {}).get("TagSpecifications", []):
        yield [tag["Key"] for tag in specification["Tags"]]


def test_no_resource_carries_more_tags_of_the_app_than_the_room_left_for_users(
    synthesize: Callable[[str], Synthesized],
) -> None:
    """`public-endpoint` sets user tags; what remains on each resource is the app's and the
    CDK's. aws: tags do not count against AWS's limit."""
    built = synthesize("public-endpoint")
    user_keys = set(built.settings.tags)
    assert user_keys
    most = 0
    for template in built.templates.values():
        for resource in template["Resources"].values():
            for keys in _tag_sets(resource):
                own = [k for k in keys if k not in user_keys and not k.startswith("aws:")]
                most = max(most, len(own))
    assert 0 < most <= TAGS_ADDED_BY_APP
    assert TAGS_PER_RESOURCE - TAGS_ADDED_BY_APP >= 40  # room enough for a tagging policy


def test_the_most_taints_accepted_fill_exactly_what_eks_takes_per_node_group() -> None:
    """The user's taints and the app's own (placement) together: at the boundary, accepted and
    exactly at EKS's limit; one more, refused."""
    from app_config import ConfigError

    def taints(count: int) -> str:
        return json.dumps([{"key": f"example.com/t{i}", "value": "v"} for i in range(count)])

    room = EKS_TAINTS_PER_NODE_GROUP - 2
    settings = settings_for("default", **{"gpu_nodes.decode.taints": taints(room)})
    assert len(settings.gpu_nodes.decode.placement("decode").taints) == EKS_TAINTS_PER_NODE_GROUP
    with pytest.raises(ConfigError, match=f"at most {room}"):
        settings_for("default", **{"gpu_nodes.decode.taints": taints(room + 1)})
