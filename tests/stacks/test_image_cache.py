"""serving.image_cache: the Ray LLM image pulled through the account's ECR pull-through cache of
ECR Public, its repositories scanned; the pods' image address, the rule, the creation template,
the scanning filter and the nodes' permissions must all name the same repositories."""

from __future__ import annotations

import fnmatch
import itertools
import json
import re
from datetime import UTC, datetime

import pytest

from catalog.ray_llm_image import DEFAULT_IMAGE_TAG, PUBLIC_REGISTRY, PUBLIC_REPOSITORY
from pdctl.image_cache import expiring_rule
from tests.conftest import Synthesized, cfn_text
from tests.ecr_lifecycle_model import (
    FORMER_SEVEN_DAY_POLICY,
    CachedImage,
    day_pinned_build_is_lost,
    expired,
    validate,
)

START = datetime(2026, 9, 1, tzinfo=UTC)
TAG = DEFAULT_IMAGE_TAG  # the tag the simulated cache holds
# AWS republishes a DLC tag with patch releases: a busy (weekly) and a slow (two-monthly)
# cadence, over a year.
WEEKLY_FOR_A_YEAR = list(range(7, 366, 7))
CADENCES = {"weekly": WEEKLY_FOR_A_YEAR, "two-monthly": list(range(60, 366, 60))}


def _one(app: Synthesized, resource_type: str) -> dict:
    (resource,) = app.resources("cluster", resource_type).values()
    return resource["Properties"]


def _ray_images(app: Synthesized) -> set[str]:
    """Repository and tag of every image of the Ray LLM tag in the serving stack (the account
    is a token in an account-agnostic template: read from the registry host on)."""
    text = json.dumps(app.templates["serving"])
    found = re.findall(r"\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/([^\"\\]+)", text)
    tag = app.settings.serving.image_tag
    return {image for image in found if image.endswith(f":{tag}")}


def test_the_cache_copies_ecr_public_into_the_configured_prefix(reserved_app) -> None:
    settings = reserved_app.settings
    rule = _one(reserved_app, "AWS::ECR::PullThroughCacheRule")
    prefix = settings.serving.image_cache.repository_prefix(settings.prefix)
    assert rule == {
        "EcrRepositoryPrefix": prefix,
        "UpstreamRegistry": "ecr-public",
        "UpstreamRegistryUrl": PUBLIC_REGISTRY,
    }
    assert 2 <= len(prefix) <= 30  # ECR's bounds for a pull-through cache prefix
    # Every Ray pod pulls <account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<upstream path>:tag
    images = _ray_images(reserved_app)
    assert images == {f"{prefix}/{PUBLIC_REPOSITORY}:{settings.serving.image_tag}"}


def test_the_template_and_the_scanning_rule_cover_what_the_cache_creates(reserved_app) -> None:
    prefix = _one(reserved_app, "AWS::ECR::PullThroughCacheRule")["EcrRepositoryPrefix"]
    cached_repository = f"{prefix}/{PUBLIC_REPOSITORY}"
    template = _one(reserved_app, "AWS::ECR::RepositoryCreationTemplate")
    assert template["Prefix"] == prefix
    assert template["AppliedFor"] == ["PULL_THROUGH_CACHE"]
    assert template["ImageTagMutability"] == "MUTABLE"  # AWS republishes the tag
    scanning = _one(reserved_app, "AWS::ECR::RegistryScanningConfiguration")
    assert scanning["ScanType"] == "ENHANCED"
    (rule,) = scanning["Rules"]
    assert rule["ScanFrequency"] == "CONTINUOUS_SCAN"
    (repository_filter,) = rule["RepositoryFilters"]
    assert fnmatch.fnmatchcase(cached_repository, repository_filter["Filter"])
    assert not fnmatch.fnmatchcase("someone-elses/repository", repository_filter["Filter"])


def test_nodes_may_trigger_the_cache_only_for_its_repositories(reserved_app) -> None:
    prefix = _one(reserved_app, "AWS::ECR::PullThroughCacheRule")["EcrRepositoryPrefix"]
    statements = [
        statement
        for policy in reserved_app.resources("cluster", "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "ecr:BatchImportUpstreamImage" in json.dumps(statement)
    ]
    (statement,) = statements
    assert sorted(statement["Action"]) == ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"]
    resource = cfn_text(statement["Resource"])
    assert resource.endswith(f":repository/{prefix}/*")
    assert fnmatch.fnmatchcase(f"repository/{prefix}/{PUBLIC_REPOSITORY}", resource.split(":")[-1])


def test_without_the_cache_nothing_of_it_exists(default_app) -> None:
    for resource_type in (
        "AWS::ECR::PullThroughCacheRule",
        "AWS::ECR::RepositoryCreationTemplate",
        "AWS::ECR::RegistryScanningConfiguration",
    ):
        assert not default_app.resources("cluster", resource_type)


def _template_lifecycle(app: Synthesized) -> dict | None:
    text = _one(app, "AWS::ECR::RepositoryCreationTemplate").get("LifecyclePolicy")
    return json.loads(text) if text else None


def test_the_cache_never_expires_a_build_a_cluster_pins(reserved_app) -> None:
    """ECR lifecycle rules cannot select by digest, and a pinned build turns untagged when AWS
    moves the tag: evaluated over a year of weekly republishes, the template's policy (which
    every repository the cache creates keeps) must never remove it."""
    policy = _template_lifecycle(reserved_app)
    for republished in CADENCES.values():
        assert day_pinned_build_is_lost(policy, START, republished, 365) is None
    assert expiring_rule(json.dumps(policy or {"rules": []}), TAG) is None


# The policies an operator (or an earlier template) might give the repository: every tag status
# (tagged rules matching the image's tag or another one), count type and action.
def _policies():
    for status, (count_type, number), action in itertools.product(
        ("untagged", "any", "tagged:serve-llm-*", "tagged:train-ml-*"),
        (("sinceImagePushed", 7), ("sinceImagePushed", 30), ("imageCountMoreThan", 1),
         ("imageCountMoreThan", 5), ("sinceImagePulled", 14)),
        ("expire", "transition"),
    ):  # fmt: skip
        tag_status, _, pattern = status.partition(":")
        selection = {"tagStatus": tag_status, "countType": count_type, "countNumber": number}
        if count_type != "imageCountMoreThan":
            selection["countUnit"] = "days"
        if pattern:
            selection["tagPatternList"] = [pattern]
        action_body = {"type": action}
        if action == "transition":
            action_body["targetStorageClass"] = "archive"
        yield {"rules": [{"rulePriority": 10, "selection": selection, "action": action_body}]}


@pytest.mark.parametrize("cadence", CADENCES)
@pytest.mark.parametrize("policy", list(_policies()), ids=lambda p: json.dumps(p["rules"][0]))
def test_a_policy_pdctl_accepts_never_loses_the_pinned_build(policy, cadence) -> None:
    """pdctl preflight's judgement of an existing repository's policy is sound against ECR's
    evaluation: a policy it accepts keeps the pinned build through a year of republishes; every
    rule that reaches untagged images is flagged and does lose it."""
    lost = day_pinned_build_is_lost(policy, START, CADENCES[cadence], 365)
    flagged = expiring_rule(json.dumps(policy), TAG)
    if flagged is None:
        assert lost is None
    if policy["rules"][0]["selection"]["tagStatus"] != "tagged":
        assert flagged is not None
        assert lost is not None


def test_the_former_seven_day_rule_would_have_deleted_the_pinned_build() -> None:
    week = FORMER_SEVEN_DAY_POLICY
    first_move = WEEKLY_FOR_A_YEAR[0]
    lost = day_pinned_build_is_lost(week, START, WEEKLY_FOR_A_YEAR, 365)
    # Pushed on day 0: expired on the first daily evaluation where it is both untagged (the
    # tag moved) and older than 7 days ("older than", so day 8 at the earliest).
    days = week["rules"][0]["selection"]["countNumber"]
    assert lost == max(first_move, days + 1)


def test_the_model_keeps_what_a_higher_priority_rule_matches() -> None:
    """ECR: an image matching a higher-priority rule's tag requirements cannot be expired by a
    lower one, which still counts it."""
    old, young = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)
    images = [
        CachedImage("sha256:a", old, frozenset({"prod-1"})),
        CachedImage("sha256:b", young, frozenset({"prod-2"})),
        CachedImage("sha256:c", old, frozenset({"dev-1"})),
    ]
    policy = {
        "rules": [
            {
                "rulePriority": 1,
                "selection": {
                    "tagStatus": "tagged",
                    "tagPrefixList": ["prod"],
                    "countType": "imageCountMoreThan",
                    "countNumber": 1,
                },
                "action": {"type": "expire"},
            },
            {
                "rulePriority": 2,
                "selection": {
                    "tagStatus": "any",
                    "countType": "sinceImagePushed",
                    "countUnit": "days",
                    "countNumber": 30,
                },
                "action": {"type": "expire"},
            },
        ]
    }
    now = datetime(2026, 12, 1, tzinfo=UTC)
    # prod-2 is older than 30 days but rule 1 matched its tags: rule 2 may not expire it.
    assert expired(policy, images, now) == {"sha256:a", "sha256:c"}


@pytest.mark.parametrize(
    ("rules", "refusal"),
    [
        ([("untagged", 1), ("untagged", 2)], "only one rule may select untagged"),
        ([("any", 1), ("untagged", 2)], "highest priority"),
        ([("untagged", 1), ("any", 1)], "unique"),
    ],
)
def test_the_model_refuses_what_ecr_refuses(rules, refusal) -> None:
    policy = {
        "rules": [
            {
                "rulePriority": priority,
                "selection": {
                    "tagStatus": status,
                    "countType": "imageCountMoreThan",
                    "countNumber": 1,
                },
                "action": {"type": "expire"},
            }
            for status, priority in rules
        ]
    }
    with pytest.raises(ValueError, match=refusal):
        validate(policy)


def _cache_template(**settings: object) -> dict:
    """The construct alone in a bare stack: cheaper than synthesizing another configuration."""
    from aws_cdk import App, Environment, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template

    from app_config.serving import ImageCache as ImageCacheSettings
    from constructs.cluster.image_cache import ImageCache

    stack = Stack(App(), "cache", env=Environment(account="123456789012", region="us-west-2"))
    role = iam.Role(stack, "Nodes", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    ImageCache(
        stack,
        "ImageCache",
        settings=ImageCacheSettings(enabled=True, **settings),
        prefix="pd-llm",
        node_role=role,
    )
    return Template.from_stack(stack).to_json()["Resources"]


def test_by_default_the_accounts_registry_scanning_is_left_alone() -> None:
    resources = _cache_template()
    types = {resource["Type"] for resource in resources.values()}
    assert "AWS::ECR::PullThroughCacheRule" in types
    assert "AWS::ECR::RegistryScanningConfiguration" not in types


def test_changing_registry_scanning_takes_explicit_consent() -> None:
    with pytest.raises(ValueError, match="replace_registry_scanning"):
        _cache_template(scanning="basic")
    resources = _cache_template(scanning="basic", replace_registry_scanning=True)
    (scanning,) = [r for r in resources.values() if r["Type"].endswith("ScanningConfiguration")]
    assert scanning["Properties"]["ScanType"] == "BASIC"
    assert scanning["Properties"]["Rules"][0]["ScanFrequency"] == "SCAN_ON_PUSH"
