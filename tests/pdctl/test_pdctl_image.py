"""pdctl image against botocore's Stubber (the ECR API's own request and response shapes)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

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
from pdctl import image, image_cache, scan_report
from pdctl.cli import app
from serving_manifests.image import cache_repository
from tests import aws_stubs
from tests.configurations import ACCOUNT, settings_for
from tests.ecr_lifecycle_model import FORMER_SEVEN_DAY_POLICY

OLD = "sha256:" + "a" * 64
NEW = "sha256:" + "b" * 64


def _ecr(digest: str | None):
    client = aws_stubs.client("ecr")
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
    assert "not compared with the registry (--no-registry)" in data["verdict"]
    assert data["inconclusive"] is False


def test_with_the_image_cache_the_cache_repository_is_asked() -> None:
    """The pods pull the account's cached copy: its digest is the one to compare and pin."""
    settings = settings_for("default", **{"serving.image_cache.enabled": "true"})
    client = aws_stubs.client("ecr")
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
    client = aws_stubs.client("ecr")
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


def test_enhanced_scan_access_denied_names_inspectors_permission() -> None:
    settings, client = _scan_stub(error="AccessDeniedException")
    summary = scan_report.scan_summary(client, settings, ACCOUNT)
    assert summary.status == "AccessDeniedException"
    assert "inspector2:ListFindings" in summary.verdict
    assert "\n" not in summary.verdict


def test_an_expired_scan_eligibility_is_reported_as_inspectors_rescan_duration() -> None:
    settings, client = _scan_stub(
        {
            "imageScanStatus": {
                "status": "SCAN_ELIGIBILITY_EXPIRED",
                "description": "Scan eligibility expired",
            },
            "imageScanFindings": {"findingSeverityCounts": {}},
        }
    )
    verdict = scan_report.scan_summary(client, settings, ACCOUNT).verdict
    assert "re-scan duration" in verdict
    assert "no critical or high" not in verdict


def test_a_clean_enhanced_scan_needs_its_empty_findings_list_as_evidence() -> None:
    settings, client = _scan_stub(
        {"imageScanStatus": {"status": "ACTIVE"}, "imageScanFindings": {"enhancedFindings": []}}
    )
    assert scan_report.scan_summary(client, settings, ACCOUNT).verdict == (
        "no critical or high findings"
    )


NAN, INF = float("nan"), float("inf")
# AWS answers a Stubber would refuse (it validates botocore's model), as a broken proxy, an SDK
# bug or a future API might still deliver them: none may read as a clean scan.
MALFORMED = [
    None,
    [],
    "COMPLETE",
    {},
    {"imageScanStatus": None},
    {"imageScanStatus": {"status": 7}},
    {"imageScanStatus": {"status": "COMPLETE"}},
    {"imageScanStatus": {"status": "COMPLETE"}, "imageScanFindings": None},
    {"imageScanStatus": {"status": "COMPLETE"}, "imageScanFindings": {}},
    {"imageScanStatus": {"status": "ACTIVE"}, "imageScanFindings": {"findings": None}},
    {"imageScanStatus": {"status": "COMPLETE"}, "imageScanFindings": {"findingSeverityCounts": []}},
    *(
        {
            "imageScanStatus": {"status": "COMPLETE"},
            "imageScanFindings": {"findingSeverityCounts": {"LOW": 1, severity: count}},
        }
        for severity, count in [
            ("HIGH", NAN),
            ("CRITICAL", INF),
            ("HIGH", -1),
            ("HIGH", "5"),
            ("CRITICAL", True),
            ("HIGH", 1.5),
            ("HIGH", None),
            ("MEDIUM", {"n": 1}),
        ]
    ),
]


@pytest.mark.parametrize("response", MALFORMED, ids=repr)
def test_a_malformed_answer_is_one_clear_line_never_a_clean_verdict(response) -> None:
    summary = scan_report.summarize("pd-llm-dlc/deep-learning-containers/ray", response)
    assert summary.verdict != "no critical or high findings"
    assert summary.verdict
    assert "\n" not in summary.verdict
    assert json.dumps(summary.as_dict(), allow_nan=False)  # --json output, NaN never copied


def test_server_text_stays_one_plain_line() -> None:
    summary = scan_report.summarize(
        "repo",
        {
            "imageScanStatus": {"status": "FAILED", "description": "[red]boom[/red]\n" * 200},
            "imageScanFindings": {"findingSeverityCounts": {}},
        },
    )
    assert "\n" not in summary.verdict
    assert len(summary.description) <= 300


# pdctl preflight's checks of the cache repository, against the ECR API's shapes.
PINNED = {"serving.image_cache.enabled": "true", "serving.image_digest": OLD}
SEVEN_DAYS = json.dumps(FORMER_SEVEN_DAY_POLICY)


def _repository_stub(settings, repository_exists: bool, image: str, lifecycle: str | None):
    """image: 'present', 'missing' or '' (not asked); lifecycle: policy text, or None."""
    client = aws_stubs.client("ecr")
    stubber = Stubber(client)
    repository = cache_repository(settings)
    if not repository_exists:
        stubber.add_client_error("describe_repositories", "RepositoryNotFoundException", "none")
    else:
        stubber.add_response(
            "describe_repositories",
            {
                "repositories": [
                    {
                        "repositoryName": repository,
                        "registryId": ACCOUNT,
                        "repositoryArn": f"arn:aws:ecr:us-west-2:{ACCOUNT}:repository/{repository}",
                    }
                ]
            },
            {"repositoryNames": [repository]},
        )
    digest = settings.serving.image_digest
    if image == "missing":
        stubber.add_client_error("describe_images", "ImageNotFoundException", "not found")
    elif image == "present":
        stubber.add_response(
            "describe_images",
            {
                "imageDetails": [
                    {
                        "registryId": ACCOUNT,
                        "repositoryName": repository,
                        "imageDigest": digest,
                        "imagePushedAt": datetime(2026, 9, 1, tzinfo=UTC),
                    }
                ]
            },
            {"repositoryName": repository, "imageIds": [{"imageDigest": digest}]},
        )
    if image and lifecycle is None:
        stubber.add_client_error(
            "get_lifecycle_policy", "LifecyclePolicyNotFoundException", "no policy"
        )
    elif image:
        stubber.add_response(
            "get_lifecycle_policy",
            {"registryId": ACCOUNT, "repositoryName": repository, "lifecyclePolicyText": lifecycle},
            {"repositoryName": repository},
        )
    stubber.activate()
    return client, stubber


@pytest.mark.parametrize(
    ("overrides", "exists", "image", "lifecycle", "failing", "words"),
    [
        (CACHED, False, "", None, [], "first pull by tag creates it"),
        (PINNED, False, "", None, ["image cache repository"], "imports only on a pull by tag"),
        (PINNED, True, "missing", None, ["pinned build"], "imports only on a pull by tag"),
        (PINNED, True, "present", None, [], "outlives `cdk destroy`"),
        (PINNED, True, "present", SEVEN_DAYS, ["cache lifecycle"], "delete-lifecycle-policy"),
        ({}, True, "", None, [], "left from an earlier deployment"),
        ({}, False, "", None, [], "none left"),
    ],
)
def test_preflight_judges_the_cache_repository(
    overrides, exists, image, lifecycle, failing, words
) -> None:
    settings = settings_for("default", **overrides)
    client, stubber = _repository_stub(settings, exists, image, lifecycle)
    checks = image_cache.cache_repository_checks(client, settings)
    stubber.assert_no_pending_responses()
    assert [c.name.split(" ")[0] for c in checks if not c.ok] == [f.split(" ")[0] for f in failing]
    assert words in " ".join(f"{c.detail} {c.fix}" for c in checks)


def test_preflight_names_the_permissions_it_lacks() -> None:
    settings = settings_for("default", **PINNED)
    client = aws_stubs.client("ecr")
    with Stubber(client) as stubber:
        stubber.add_client_error("describe_repositories", "AccessDeniedException", "denied")
        (check,) = image_cache.cache_repository_checks(client, settings)
    assert not check.ok
    assert "ecr:DescribeRepositories" in check.fix


def _cache_lookup_stub(settings, pinned_present: bool):
    client = aws_stubs.client("ecr")
    stubber = Stubber(client)
    repository = cache_repository(settings)
    tag = settings.serving.image_tag
    images = [
        {
            "registryId": ACCOUNT,
            "repositoryName": repository,
            "imageId": {"imageDigest": NEW, "imageTag": tag},
        }
    ]
    failures = []
    if pinned_present:
        images.append(
            {"registryId": ACCOUNT, "repositoryName": repository, "imageId": {"imageDigest": OLD}}
        )
    else:
        failures.append(
            {
                "imageId": {"imageDigest": OLD},
                "failureCode": "ImageNotFound",
                "failureReason": "Requested image not found",
            }
        )
    stubber.add_response(
        "batch_get_image",
        {"images": images, "failures": failures},
        {
            "registryId": ACCOUNT,
            "repositoryName": repository,
            "imageIds": [{"imageTag": tag}, {"imageDigest": OLD}],
            "acceptedMediaTypes": image.MANIFEST_TYPES,
        },
    )
    stubber.activate()
    return client


@pytest.mark.parametrize(
    ("present", "verdict"),
    [(True, "a newer build of the tag is published"), (False, "not in the account's image cache")],
)
def test_with_the_cache_a_pinned_digest_is_looked_up_there_too(present, verdict) -> None:
    settings = settings_for("default", **PINNED)
    result = image.report(settings, _cache_lookup_stub(settings, present), [], account=ACCOUNT)
    assert result.registry_digest == NEW
    assert result.pinned_in_cache is present
    assert verdict in result.verdict


@pytest.mark.parametrize(
    "response",
    [
        {"images": [{"imageId": {"imageTag": "serve-llm-cuda-v1.0"}}]},
        {
            "images": [
                {"imageId": {"imageDigest": "sha256:short", "imageTag": "serve-llm-cuda-v1.0"}}
            ]
        },
        {"images": "none", "failures": [{"imageId": None, "failureReason": 3}]},
        {"images": [None, 5], "failures": None},
        [],
    ],
    ids=repr,
)
def test_a_malformed_registry_answer_is_no_digest_not_a_crash(response) -> None:
    class Registry:
        def batch_get_image(self, **_: object) -> object:
            return response

    result = image.report(settings_for("default"), Registry(), [])
    assert result.registry_digest is None
    assert "cannot tell" in result.verdict


@pytest.mark.parametrize(
    "text",
    [None, "", "{", "[]", '{"rules": 3}', '{"rules": [7]}', '{"rules": [{"rulePriority": NaN}]}',
     '{"rules": [{"rulePriority": 1, "selection": "any", "action": {"type": "expire"}}]}'],
)  # fmt: skip
def test_an_unreadable_lifecycle_policy_counts_as_one_that_may_remove_the_build(text) -> None:
    assert image_cache.expiring_rule(text, "serve-llm-cuda-v1.0")


def test_scan_report_prints_aws_text_as_text(monkeypatch) -> None:
    """A description from AWS with rich markup in it reaches the terminal literally."""

    client = aws_stubs.client("ecr")
    stubber = Stubber(client)
    tag_image = {"imageDigest": NEW, "imageTag": settings_for("default").serving.image_tag}
    stubber.add_response("batch_get_image", {"images": [{"imageId": tag_image}], "failures": []})
    stubber.add_response(
        "describe_image_scan_findings",
        {
            "imageScanStatus": {
                "status": "FAILED",
                "description": "[bold red]disk[/bold red] full",
            },
        },
    )
    stubber.activate()
    monkeypatch.setattr(boto3, "client", lambda *_, **__: client)  # cli imports boto3 lazily
    result = CliRunner().invoke(
        app,
        [
            "image",
            "--scan-report",
            "-c",
            "serving.image_cache.enabled=true",
            "-c",
            f"account={ACCOUNT}",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "[bold red]disk[/bold red] full" in result.output


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
