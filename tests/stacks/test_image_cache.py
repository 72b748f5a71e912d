"""serving.image_cache: the Ray LLM image pulled through the account's ECR pull-through cache of
ECR Public, its repositories scanned; the pods' image address, the rule, the creation template,
the scanning filter and the nodes' permissions must all name the same repositories."""

from __future__ import annotations

import fnmatch
import json
import re

from catalog.ray_llm_image import PUBLIC_REGISTRY, PUBLIC_REPOSITORY
from tests.conftest import Synthesized, cfn_text


def _one(app: Synthesized, resource_type: str) -> dict:
    (resource,) = app.resources("cluster", resource_type).values()
    return resource["Properties"]


def _ray_images(app: Synthesized) -> set[str]:
    """Repository and tag of every image of the Ray LLM tag in the serving stack (the account
    is a token in an account-agnostic template: read from the registry host on)."""
    text = json.dumps(app.templates["serving"])
    found = re.findall(r"\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/([^\"\\]+)", text)
    tag = app.built.settings.serving.image_tag
    return {image for image in found if image.endswith(f":{tag}")}


def test_the_cache_copies_ecr_public_into_the_configured_prefix(reserved_app) -> None:
    settings = reserved_app.built.settings
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
    lifecycle = json.loads(template["LifecyclePolicy"])
    assert {rule["selection"]["tagStatus"] for rule in lifecycle["rules"]} == {"untagged"}
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
