"""serving.image_mirror: the address forms ECR and the container runtime accept, the relations of
the mirror's region and account to the deployment's, and its conflicts with serving.image_cache,
each as a table (the repository given -> what the pods pull, or the rule's code and message)."""

from __future__ import annotations

import json

import pytest

from app_config import ConfigError
from app_config.image_repository import (
    ECR_REPOSITORY_NAME_LENGTH,
    NAME_TOTAL_LENGTH_MAX,
    parse_image_repository,
)
from catalog.ray_llm_image import DEFAULT_IMAGE_TAG, IMAGES
from serving_manifests.image import pod_image
from tests.configurations import render_deployed, settings_for

MIRROR = "serving.image_mirror.repository"
DIGEST = "sha256:" + "b" * 64
ECR_HOST = "210987654321.dkr.ecr.us-west-2.amazonaws.com"
LONGEST_ECR_NAME = "a" * (NAME_TOTAL_LENGTH_MAX - len(ECR_HOST) - 1)


def _mirror(repository: str, **settings: bool) -> dict[str, str]:
    return {"serving.image_mirror": json.dumps({"repository": repository, **settings})}


# (as written, the repository the pods pull from, (account, region, name) when it is ECR)
ACCEPTED = [
    (f"{ECR_HOST}/dlc/ray", f"{ECR_HOST}/dlc/ray", ("210987654321", "us-west-2", "dlc/ray")),
    # The ARN names the same repository; the pods pull it by its URI.
    (
        "arn:aws:ecr:us-east-1:210987654321:repository/mirror/deep-learning-containers/ray",
        "210987654321.dkr.ecr.us-east-1.amazonaws.com/mirror/deep-learning-containers/ray",
        ("210987654321", "us-east-1", "mirror/deep-learning-containers/ray"),
    ),
    # ECR's separators within a component: '.', '_', '__' and runs of '-'.
    (f"{ECR_HOST}/a.b_c__d--e/ray", f"{ECR_HOST}/a.b_c__d--e/ray", None),
    (f"{ECR_HOST}/{LONGEST_ECR_NAME}", f"{ECR_HOST}/{LONGEST_ECR_NAME}", None),
    ("registry.example.com/dlc/ray", "registry.example.com/dlc/ray", None),
    (
        "artifactory.example.com:8443/docker-remote/ray",
        "artifactory.example.com:8443/docker-remote/ray",
        None,
    ),
    ("localhost:5000/ray", "localhost:5000/ray", None),
]


@pytest.mark.parametrize(("written", "uri", "ecr"), ACCEPTED)
def test_a_mirror_address_is_pulled_by_tag_or_by_the_pinned_digest(
    written: str, uri: str, ecr: tuple[str, str, str] | None
) -> None:
    parsed = parse_image_repository(written)
    assert parsed.uri == uri
    if ecr:
        assert parsed.ecr
        assert (parsed.ecr.account, parsed.ecr.region, parsed.ecr.name) == ecr
    by_tag = settings_for("default", **_mirror(written))
    assert pod_image(by_tag, None) == f"{uri}:{by_tag.serving.image_tag}"
    pinned = settings_for("default", **_mirror(written), **{"serving.image_digest": DIGEST})
    assert pod_image(pinned, None) == f"{uri}@{DIGEST}"


def test_an_address_of_another_registry_is_not_taken_for_ecr() -> None:
    assert parse_image_repository("registry.example.com/dlc/ray").ecr is None


def test_every_ray_container_and_init_container_pulls_from_the_mirror() -> None:
    settings = settings_for(
        "default", **_mirror(f"{ECR_HOST}/dlc/ray"), **{"serving.image_digest": DIGEST}
    )
    cluster = render_deployed(settings).rayservice["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"]] + [
        group["template"] for group in cluster["workerGroupSpecs"]
    ]
    images = {
        container["image"]
        for template in templates
        for kind in ("containers", "initContainers")
        for container in template["spec"].get(kind, [])
        if "ray" in container["image"]
    }
    assert images == {f"{ECR_HOST}/dlc/ray@{DIGEST}"}


# (the repository as written, a fragment of why ECR or the container runtime would not find it)
BAD_ADDRESSES = [
    (f"https://{ECR_HOST}/dlc/ray", "without a scheme"),
    (ECR_HOST, "names no repository"),
    (f"{ECR_HOST}/dlc/ray:{DEFAULT_IMAGE_TAG}", "tag or digest"),
    (f"{ECR_HOST}/dlc/ray@{DIGEST}", "tag or digest"),
    (f"{ECR_HOST}/DLC/ray", "which ECR refuses"),
    (f"{ECR_HOST}/dlc//ray", "which ECR refuses"),
    (f"{ECR_HOST}/dlc/ray-", "which ECR refuses"),
    (f"{ECR_HOST}/a", f"{ECR_REPOSITORY_NAME_LENGTH[0]} to {ECR_REPOSITORY_NAME_LENGTH[1]}"),
    (f"{ECR_HOST}/{LONGEST_ECR_NAME}a", f"at most {NAME_TOTAL_LENGTH_MAX}"),
    ("21098765432.dkr.ecr.us-west-2.amazonaws.com/ray", "12-digit account"),
    ("210987654321.dkr.ecr.us-west-9.amazonaws.com/ray", "not an AWS Region"),
    ("210987654321.dkr-ecr.us-west-2.on.aws/ray", "no PrivateLink"),
    ("210987654321.dkr.ecr-fips.us-west-2.amazonaws.com/ray", "IPv4 name"),
    ("210987654321.dkr.ecr.cn-north-1.amazonaws.com.cn/ray", "China"),
    ("arn:aws:ecr:us-west-2:21098765432:repository/ray", "12 digits"),
    ("arn:aws:ecr:us-west-2:210987654321:repository/", "which ECR refuses"),
    ("arn:aws:ecr:us-west-2:210987654321:image/ray", "not an ECR repository ARN"),
    ("arn:aws-us-gov:ecr:us-west-2:210987654321:repository/ray", "partition"),
    ("registry/dlc/ray", "Docker Hub path"),
    ("registry.example.com/Dlc/ray", "image name cannot carry"),
    ("registry.example.com/" + "a" * NAME_TOTAL_LENGTH_MAX, f"at most {NAME_TOTAL_LENGTH_MAX}"),
]

# (overrides, the code of the error, the setting it names, a fragment of its message)
REFUSED = [
    *[(_mirror(address), "image-mirror-address", MIRROR, why) for address, why in BAD_ADDRESSES],
    (
        _mirror("arn:aws-us-gov:ecr:us-gov-west-1:210987654321:repository/ray"),
        "image-mirror-partition",
        MIRROR,
        "cannot authenticate",
    ),
    (
        {**_mirror(f"{ECR_HOST}/dlc/ray"), "serving.image_cache.enabled": "true"},
        "image-mirror-and-cache",
        "serving.image_cache.enabled",
        "keep one",
    ),
    (
        _mirror("registry.example.com/dlc/ray", pull_through_cache=True),
        "image-mirror-ecr-only",
        "serving.image_mirror.pull_through_cache",
        "needs an ECR repository",
    ),
    (
        _mirror("registry.example.com/dlc/ray", require_clean_scan=True),
        "image-mirror-ecr-only",
        "serving.image_mirror.require_clean_scan",
        "needs an ECR repository",
    ),
    (
        {
            "region": "us-gov-west-1",
            **_mirror(
                "arn:aws-us-gov:ecr:us-gov-west-1:210987654321:repository/dlc/ray",
                pull_through_cache=True,
            ),
        },
        "image-mirror-pull-through-region",
        "serving.image_mirror.pull_through_cache",
        "no pull-through cache rules",
    ),
    ({"serving.image_mirror": "{}"}, "missing", MIRROR, "required"),
]


@pytest.mark.parametrize(("overrides", "code", "path", "fragment"), REFUSED)
def test_a_mirror_no_pull_would_find_is_refused(
    overrides: dict[str, str], code: str, path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **overrides)
    found = [p for p in raised.value.problems if (p.path, p.code) == (path, code)]
    assert found, raised.value
    assert fragment in found[0].message


def test_the_catalog_still_decides_the_tag_behind_a_mirror() -> None:
    """A mirror changes where the image comes from, not what a tag carries: an unknown tag is
    refused by the catalog's rule, with how to add it."""
    with pytest.raises(ConfigError) as raised:
        settings_for(
            "default", **_mirror(f"{ECR_HOST}/dlc/ray"), **{"serving.image_tag": "ray-2.59-custom"}
        )
    (problem,) = raised.value.problems
    assert problem.path == "serving.image_tag"
    assert "add one to catalog/ray_llm_image.py" in problem.message
    assert all(tag in problem.message for tag in IMAGES)


def test_a_region_without_the_dlc_registry_is_served_from_a_mirror() -> None:
    """GovCloud has no Ray LLM DLC registry (catalog/ray_llm_image.py); with a mirror of its own
    partition the image-registry-region rule has nothing to refuse."""
    mirror = _mirror("arn:aws-us-gov:ecr:us-gov-west-1:210987654321:repository/dlc/ray")
    with pytest.raises(ConfigError, match="no Ray LLM DLC registry"):
        settings_for("default", region="us-gov-west-1")
    settings = settings_for("default", region="us-gov-west-1", **mirror)
    assert pod_image(settings, None).startswith("210987654321.dkr.ecr.us-gov-west-1.amazonaws.com/")
