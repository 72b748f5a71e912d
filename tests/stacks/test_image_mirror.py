"""serving.image_mirror in the templates (the public-endpoint configuration: the account's own ECR
pull-through cache as the mirror): every Ray pod pulls from the mirror, the nodes may import
into exactly that repository, and no policy of any configuration grants ECR beyond what a pull
needs."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from constructs.cluster.image_mirror import IMPORT_ACTIONS
from serving_manifests.image import mirror_repository
from tests.configurations import CONFIGURATIONS
from tests.conftest import Synthesized, cfn_text


def _ecr_statements(app: Synthesized, role: str) -> list[dict]:
    """Every statement of the stack's policies (inline, managed, and a role's own) that names an
    ECR action."""
    documents = [
        policy["Properties"]["PolicyDocument"]
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        for policy in app.resources(role, kind).values()
    ] + [
        inline["PolicyDocument"]
        for iam_role in app.resources(role, "AWS::IAM::Role").values()
        for inline in iam_role["Properties"].get("Policies", [])
    ]
    return [
        statement
        for document in documents
        for statement in document["Statement"]
        if any(str(action).startswith("ecr:") for action in _listed(statement["Action"]))
    ]


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else [value]


def test_every_ray_pod_pulls_the_tag_from_the_mirror(public_app: Synthesized) -> None:
    mirror = mirror_repository(public_app.settings)
    assert mirror is not None
    text = json.dumps(public_app.templates["serving"])
    expected = f"{mirror.uri}:{public_app.settings.serving.image_tag}"
    assert expected in text
    assert f"dkr.ecr.{public_app.settings.region}.amazonaws.com/ray:" not in text  # not AWS's


def test_the_nodes_may_import_into_exactly_the_mirror_repository(public_app: Synthesized) -> None:
    mirror = mirror_repository(public_app.settings)
    assert mirror is not None
    assert mirror.ecr is not None
    importing = [
        statement
        for statement in _ecr_statements(public_app, "cluster")
        if "ecr:BatchImportUpstreamImage" in _listed(statement["Action"])
    ]
    (statement,) = importing
    assert sorted(_listed(statement["Action"])) == sorted(IMPORT_ACTIONS)
    assert cfn_text(statement["Resource"]) == mirror.ecr.arn  # no wildcard, no other repository


def test_a_mirror_that_is_no_pull_through_cache_adds_no_ecr_statement(
    synthesize: Callable[..., Synthesized],
) -> None:
    """Pulling is AmazonEC2ContainerRegistryPullOnly's (the node role's managed policy): a copy
    mirror needs nothing more from this stack."""
    app = synthesize(
        "default",
        {
            "serving.image_mirror": json.dumps(
                {"repository": "210987654321.dkr.ecr.us-west-2.amazonaws.com/dlc/ray"}
            )
        },
    )
    assert _ecr_statements(app, "cluster") == []


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_no_policy_grants_every_ecr_action(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    app = synthesize(configuration)
    for role in app.templates:
        for statement in _ecr_statements(app, role):
            assert not {"ecr:*", "*"} & set(_listed(statement["Action"])), statement
