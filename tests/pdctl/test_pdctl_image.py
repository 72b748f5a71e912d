"""pdctl image against botocore's Stubber (the ECR API's own request and response shapes)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from catalog.ray_llm_image import (
    IMAGES,
    NEWEST_PUBLISHED_TAG,
    PUBLIC_REPOSITORY,
    REGISTRY_ACCOUNTS,
    REPOSITORY,
)
from pdctl import image, scan_report
from pdctl.cli import app
from serving_manifests.image import cache_repository
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


CACHED = {"serving.image_cache.enabled": "true"}


def _scan_stub(response: dict | None = None, error: str = ""):
    settings = settings_for("default", **CACHED)
    client = boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-west-2"
    ).client("ecr")
    stubber = Stubber(client)
    params = {
        "registryId": ACCOUNT,
        "repositoryName": cache_repository(settings),
        "imageId": {"imageTag": settings.serving.image_tag},
        "maxResults": 1,
    }
    if error:
        stubber.add_client_error("describe_image_scan_findings", error, "not there")
    else:
        stubber.add_response("describe_image_scan_findings", response, params)
    stubber.activate()
    return settings, client


def test_enhanced_scan_findings_are_counted_by_severity_and_judged() -> None:
    settings, client = _scan_stub(
        {
            "imageScanStatus": {"status": "ACTIVE", "description": "Continuous scan"},
            "imageScanFindings": {"findingSeverityCounts": {"HIGH": 5, "CRITICAL": 2, "LOW": 40}},
        }
    )
    summary = scan_report.scan_summary(client, settings, ACCOUNT)
    assert list(summary.counts) == ["CRITICAL", "HIGH", "LOW"]  # worst first
    assert summary.verdict.startswith("2 critical, 5 high findings")


def test_a_clean_basic_scan_says_so() -> None:
    settings, client = _scan_stub(
        {
            "imageScanStatus": {"status": "COMPLETE"},
            "imageScanFindings": {"findingSeverityCounts": {"LOW": 3}},
        }
    )
    assert scan_report.scan_summary(client, settings, ACCOUNT).verdict == (
        "no critical or high findings"
    )


@pytest.mark.parametrize(
    ("error", "hint"),
    [
        ("RepositoryNotFoundException", "has not pulled the image yet"),
        ("ScanNotFoundException", "serving.image_cache.scanning"),
    ],
)
def test_no_scan_yet_is_a_status_with_a_hint_not_a_failure_to_run(error, hint) -> None:
    settings, client = _scan_stub(error=error)
    summary = scan_report.scan_summary(client, settings, ACCOUNT)
    assert summary.status == error
    assert hint in summary.verdict


def test_scan_report_without_the_cache_is_refused_in_one_line() -> None:
    result = CliRunner().invoke(app, ["image", "--scan-report", "--no-registry"])
    assert result.exit_code == 2
    assert "serving.image_cache.enabled" in " ".join(result.output.split())


def test_the_newest_published_tag_is_a_catalog_row_on_the_newest_ray() -> None:
    """Adding a newer tag's row without moving NEWEST_PUBLISHED_TAG (or the reverse) fails."""
    newest_ray = max(
        IMAGES.values(), key=lambda row: tuple(map(int, row.ray_version.split(".")))
    ).ray_version
    assert IMAGES[NEWEST_PUBLISHED_TAG].ray_version == newest_ray


def test_image_command_says_which_tag_is_newest_and_what_a_newer_ray_needs() -> None:
    result = CliRunner().invoke(app, ["image", "--no-registry"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"{NEWEST_PUBLISHED_TAG} is AWS's newest Ray LLM DLC tag as of" in text
    assert "Ray 2.59 or 2.60 would need" in text
    assert "proxy_cls_config" in text
    assert "LoRA" in text
    data = json.loads(CliRunner().invoke(app, ["image", "--no-registry", "--json"]).output)
    assert data["newest_published_tag"] == NEWEST_PUBLISHED_TAG
    assert data["newest"].startswith(NEWEST_PUBLISHED_TAG)


def test_an_older_configured_tag_is_told_the_newest() -> None:
    report = image.report(settings_for("default"), None, [])
    older = image.ImageReport(**{**report.__dict__, "tag": "serve-llm-cuda-v0.9"})
    assert older.newest.endswith(
        f"is {NEWEST_PUBLISHED_TAG}; this deployment runs serve-llm-cuda-v0.9"
    )
