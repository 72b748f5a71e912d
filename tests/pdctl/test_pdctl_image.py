"""pdctl image against botocore's Stubber (the ECR API's own request and response shapes)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from catalog.ray_llm_image import IMAGES, PUBLIC_REPOSITORY, REGISTRY_ACCOUNTS, REPOSITORY
from pdctl import image
from tests.configurations import ACCOUNT, settings_for

OLD = "sha256:" + "a" * 64
NEW = "sha256:" + "b" * 64


def _ecr(digest: str | None):
    client = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-west-2"
    ).client("ecr")
    stubber = Stubber(client)
    settings = settings_for("default")
    params = {
        "registryId": REGISTRY_ACCOUNTS[settings.region],
        "repositoryName": REPOSITORY,
        "imageIds": [{"imageTag": settings.serving.image_tag}],
        "acceptedMediaTypes": image.MANIFEST_TYPES,
    }
    if digest:
        response = {
            "images": [
                {
                    "registryId": REGISTRY_ACCOUNTS[settings.region],
                    "repositoryName": REPOSITORY,
                    "imageId": {"imageDigest": digest, "imageTag": settings.serving.image_tag},
                }
            ],
            "failures": [],
        }
        stubber.add_response("batch_get_image", response, params)
    else:
        stubber.add_client_error("batch_get_image", "AccessDeniedException", "denied")
    stubber.activate()
    return client


@pytest.mark.parametrize(
    ("pinned", "registry", "running", "verdict"),
    [
        (OLD, OLD, [], "current"),
        (OLD, NEW, [], "a newer build of the tag is published"),
        (None, NEW, [f"x/ray@{OLD}"], "a newer build of the tag is published"),
        (None, NEW, [f"x/ray@{OLD}", f"x/ray@{NEW}"], "pods run different builds"),
        (None, NEW, [], "pin it with serving.image_digest"),
        (OLD, None, [], "cannot tell"),
    ],
)
def test_the_verdict_follows_the_digests(pinned, registry, running, verdict) -> None:
    overrides = {"serving.image_digest": pinned} if pinned else {}
    settings = settings_for("default", **overrides)
    result = image.report(settings, _ecr(registry), running)
    assert verdict in result.verdict
    assert result.versions["ray"] == IMAGES[settings.serving.image_tag].ray_version


def test_image_command_prints_json_without_asking_the_registry() -> None:
    from pdctl.cli import app

    result = CliRunner().invoke(app, ["image", "--no-registry", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["tag"] == settings_for("default").serving.image_tag
    assert data["registry_digest"] is None
    assert "cannot tell" in data["verdict"]


def test_with_the_image_cache_the_cache_repository_is_asked() -> None:
    """The pods pull the account's cached copy: its digest is the one to compare and pin."""
    settings = settings_for("default", **{"serving.image_cache.enabled": "true"})
    client = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-west-2"
    ).client("ecr")
    repository = (
        f"{settings.serving.image_cache.repository_prefix(settings.prefix)}/{PUBLIC_REPOSITORY}"
    )
    stubber = Stubber(client)
    stubber.add_response(
        "batch_get_image",
        {
            "images": [
                {
                    "registryId": ACCOUNT,
                    "repositoryName": repository,
                    "imageId": {"imageDigest": NEW, "imageTag": settings.serving.image_tag},
                }
            ],
            "failures": [],
        },
        {
            "registryId": ACCOUNT,
            "repositoryName": repository,
            "imageIds": [{"imageTag": settings.serving.image_tag}],
            "acceptedMediaTypes": image.MANIFEST_TYPES,
        },
    )
    stubber.activate()
    result = image.report(settings, client, [], account=ACCOUNT)
    stubber.assert_no_pending_responses()
    assert result.registry_digest == NEW
