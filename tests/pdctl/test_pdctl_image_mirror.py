"""pdctl preflight and pdctl image against an image mirror (serving.image_mirror), with botocore's
Stubber: the ECR API's own request and response shapes, in the mirror's account and region."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from botocore.stub import Stubber

from app_config.image_repository import parse_image_repository
from pdctl import image
from pdctl.image_mirror import mirror_checks
from pdctl.preflight import MIRROR_CLIENT, run_preflight
from tests import aws_stubs
from tests.configurations import settings_for
from tests.ecr_lifecycle_model import FORMER_SEVEN_DAY_POLICY
from tests.pdctl.test_pdctl_preflight import ADMIN, NOW, _clients, _healthy_responses, _settings

OLD = "sha256:" + "a" * 64
NEW = "sha256:" + "b" * 64
# Another account's mirror in another region: every call must name its registry.
MIRROR_ARN = "arn:aws:ecr:eu-west-1:210987654321:repository/platform/dlc/ray"
MIRROR = parse_image_repository(MIRROR_ARN).ecr
assert MIRROR is not None


def _mirror(**settings: object) -> dict[str, str]:
    return {"serving.image_mirror": json.dumps({"repository": MIRROR_ARN, **settings})}


def _scan(counts: dict[str, int] | None) -> dict:
    """A DescribeImageScanFindings answer: a finished basic scan with these counts, or none."""
    return {
        "registryId": MIRROR.account,
        "repositoryName": MIRROR.name,
        "imageScanStatus": {"status": "COMPLETE", "description": "The scan was completed."},
        "imageScanFindings": {"findingSeverityCounts": counts or {}, "findings": []},
    }


def _stub_mirror(stubber: Stubber, settings, answers: dict[str, object]) -> None:
    """Queue the mirror's answers in the order mirror_checks asks. ``answers``: repository
    ('missing' | 'denied' | present), tag (a digest or None), pinned ('present' | 'missing'),
    lifecycle (policy text or None), scan (counts, or 'none')."""
    registry = {"registryId": MIRROR.account}
    if answers.get("repository") == "missing":
        stubber.add_client_error("describe_repositories", "RepositoryNotFoundException", "none")
        return
    if answers.get("repository") == "denied":
        stubber.add_client_error("describe_repositories", "AccessDeniedException", "denied")
        return
    stubber.add_response(
        "describe_repositories",
        {"repositories": [{"repositoryName": MIRROR.name, "registryId": MIRROR.account}]},
        {**registry, "repositoryNames": [MIRROR.name]},
    )
    tag, serving = settings.serving.image_tag, settings.serving
    tagged = answers.get("tag")
    stubber.add_response(
        "batch_get_image",
        {
            "images": [{"imageId": {"imageDigest": tagged, "imageTag": tag}}] if tagged else [],
            "failures": []
            if tagged
            else [
                {
                    "imageId": {"imageTag": tag},
                    "failureCode": "ImageNotFound",
                    "failureReason": "Requested image not found",
                }
            ],
        },
        {
            **registry,
            "repositoryName": MIRROR.name,
            "imageIds": [{"imageTag": tag}],
            "acceptedMediaTypes": image.MANIFEST_TYPES,
        },
    )
    digest = serving.image_digest
    if digest:
        params = {**registry, "repositoryName": MIRROR.name, "imageIds": [{"imageDigest": digest}]}
        if answers.get("pinned") == "missing":
            stubber.add_client_error("describe_images", "ImageNotFoundException", "not found")
        else:
            stubber.add_response(
                "describe_images",
                {
                    "imageDetails": [
                        {
                            "imageDigest": digest,
                            "imagePushedAt": datetime(2026, 9, 1, tzinfo=UTC),
                            "imageStatus": "ACTIVE",
                        }
                    ]
                },
                params,
            )
        lifecycle = answers.get("lifecycle")
        if lifecycle is None:
            stubber.add_client_error(
                "get_lifecycle_policy", "LifecyclePolicyNotFoundException", "no policy"
            )
        else:
            stubber.add_response(
                "get_lifecycle_policy",
                {"lifecyclePolicyText": lifecycle},
                {**registry, "repositoryName": MIRROR.name},
            )
    if serving.image_mirror and serving.image_mirror.require_clean_scan:
        scan = answers.get("scan")
        if scan == "none":
            stubber.add_client_error(
                "describe_image_scan_findings", "ScanNotFoundException", "no scan"
            )
        else:
            image_id = (
                {"imageDigest": digest} if digest else {"imageTag": settings.serving.image_tag}
            )
            stubber.add_response(
                "describe_image_scan_findings",
                _scan(scan),  # type: ignore[arg-type]
                {**registry, "repositoryName": MIRROR.name, "imageId": image_id, "maxResults": 1},
            )


SEVEN_DAYS = json.dumps(FORMER_SEVEN_DAY_POLICY)

# (overrides, answers, checks that fail (name's first word), undecided, words in details or fixes)
SCENARIOS = [
    ({}, {"tag": NEW}, [], False, "exists in account 210987654321"),
    ({}, {"repository": "missing"}, ["image"], False, "create it in account 210987654321"),
    ({}, {"repository": "denied"}, ["image"], True, "ecr:DescribeRepositories"),
    ({}, {"tag": None}, ["tag"], False, "crane copy"),
    (_mirror(pull_through_cache=True), {"tag": None}, [], False, "first pull by tag imports"),
    ({"serving.image_digest": OLD}, {"tag": OLD}, [], False, "(the pinned build)"),
    ({"serving.image_digest": OLD}, {"tag": NEW}, [], False, "not the pinned build"),
    (
        {"serving.image_digest": OLD},
        {"tag": NEW, "pinned": "missing"},
        ["pinned"],
        False,
        "or pin a digest the mirror holds",
    ),
    (
        {**_mirror(pull_through_cache=True), "serving.image_digest": OLD},
        {"tag": NEW, "pinned": "missing"},
        ["pinned"],
        False,
        "imports only on a pull by tag",
    ),
    (
        {"serving.image_digest": OLD},
        {"tag": OLD, "lifecycle": SEVEN_DAYS},
        ["mirror"],
        False,
        "--registry-id 210987654321",
    ),
    (_mirror(require_clean_scan=True), {"tag": NEW, "scan": {"LOW": 3}}, [], False, "no critical"),
    (
        _mirror(require_clean_scan=True),
        {"tag": NEW, "scan": {"HIGH": 2, "LOW": 3}},
        ["scan"],
        False,
        "2 high findings",
    ),
    (_mirror(require_clean_scan=True), {"tag": NEW, "scan": "none"}, ["scan"], True, "no scan"),
]


@pytest.mark.parametrize(("overrides", "answers", "failing", "undecided", "words"), SCENARIOS)
def test_preflight_judges_the_ecr_mirror(overrides, answers, failing, undecided, words) -> None:
    settings = settings_for("default", **{**_mirror(), **overrides})
    client = aws_stubs.client("ecr")
    with Stubber(client) as stubber:
        _stub_mirror(stubber, settings, answers)
        checks = mirror_checks(client, settings)
        stubber.assert_no_pending_responses()
    not_ok = [c for c in checks if not c.ok]
    assert [c.name.split(" ")[0] for c in not_ok] == failing
    assert any(c.inconclusive for c in not_ok) == undecided
    assert words in " ".join(f"{c.detail} {c.fix}" for c in checks)


def test_a_registry_that_is_not_ecr_is_said_to_be_unchecked_and_never_asked() -> None:
    settings = settings_for(
        "default",
        **{"serving.image_mirror": json.dumps({"repository": "registry.example.com/dlc/ray"})},
    )
    client = aws_stubs.client("ecr")
    with Stubber(client):  # any call would fail: nothing is queued
        (check,) = mirror_checks(client, settings)
    assert check.detail.startswith("not checked")
    assert "docker buildx imagetools inspect registry.example.com/dlc/ray:" in check.detail


def test_preflight_asks_the_mirrors_region_and_not_awss_registry() -> None:
    """With a mirror, the DLC registry check is not run (the pods do not pull from it), and the
    mirror's checks go to the client of the mirror's region."""
    settings = _settings(
        **{"cluster.admin_principal_arns": ADMIN, "serving.image_cache.enabled": "false"},
        **_mirror(),
    )
    clients = _clients()
    clients[MIRROR_CLIENT] = aws_stubs.client("ecr")
    stubbers = {name: Stubber(client) for name, client in clients.items()}
    for name, calls in _healthy_responses(settings).items():
        for operation, response, params in calls:
            if name == "ecr" and operation == "batch_get_image":
                continue  # AWS's registry: not asked with a mirror
            if operation.startswith("!"):
                stubbers[name].add_client_error(
                    operation[1:],
                    service_error_code=response["code"],
                    service_message=response.get("message", ""),
                )
            else:
                stubbers[name].add_response(operation, response, params)
    _stub_mirror(stubbers[MIRROR_CLIENT], settings, {"tag": NEW})
    for stubber in stubbers.values():
        stubber.activate()
    checks = run_preflight(clients, settings, now=NOW)
    for stubber in stubbers.values():
        stubber.assert_no_pending_responses()
    assert [c.name for c in checks if not c.ok] == []
    names = [c.name for c in checks]
    assert not [n for n in names if n.startswith("Ray LLM image")]
    assert f"image mirror repository {MIRROR.uri}" in names


def test_pdctl_image_reads_the_mirror_and_whether_it_holds_the_pinned_build() -> None:
    settings = settings_for("default", **_mirror(), **{"serving.image_digest": OLD})
    client = aws_stubs.client("ecr")
    with Stubber(client) as stubber:
        stubber.add_response(
            "batch_get_image",
            {
                "images": [
                    {"imageId": {"imageDigest": NEW, "imageTag": settings.serving.image_tag}}
                ],
                "failures": [
                    {
                        "imageId": {"imageDigest": OLD},
                        "failureCode": "ImageNotFound",
                        "failureReason": "Requested image not found",
                    }
                ],
            },
            {
                "registryId": MIRROR.account,
                "repositoryName": MIRROR.name,
                "imageIds": [{"imageTag": settings.serving.image_tag}, {"imageDigest": OLD}],
                "acceptedMediaTypes": image.MANIFEST_TYPES,
            },
        )
        result = image.report(settings, client, [])
    assert result.uri == f"{MIRROR.uri}@{OLD}"
    assert result.registry_digest == NEW
    assert result.pinned_in_cache is False
    assert "not in the mirror" in result.verdict


def test_pdctl_image_does_not_ask_aws_about_a_registry_that_is_not_ecr() -> None:
    settings = settings_for(
        "default",
        **{"serving.image_mirror": json.dumps({"repository": "registry.example.com/dlc/ray"})},
    )
    client = aws_stubs.client("ecr")
    with Stubber(client):
        result = image.report(settings, client, [])
    assert result.registry_digest is None
    assert not result.inconclusive  # nothing to ask: not "cannot tell"
    assert "not an ECR registry" in result.verdict
