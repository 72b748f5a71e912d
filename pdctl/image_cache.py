"""The account's pull-through cache repository of the Ray LLM image, read before a deploy.

Three facts of ECR that no template can check:
- the pull-through cache imports an image only on a pull by tag, never on a first pull by
  digest, even as `repo:tag@digest` (aws/containers-roadmap#2837): a pinned serving.image_digest
  must already be in the repository, or every Ray pod ends in ImagePullBackOff;
- a lifecycle rule that reaches the pinned build (tagStatus `untagged` or `any`, or `tagged`
  matching the tag) deletes it in time, once AWS moves the tag or sooner; repositories keep the
  lifecycle policy they were created with, so one made under an older creation template may
  still carry such a rule;
- the repository is made by the cache, not by CloudFormation: it outlives `cdk destroy`.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from app_config import Settings
from pdctl import aws_errors
from pdctl.checks import Check, failed, passed, undecided
from serving_manifests.image import cache_repository

# What these checks read; the fix for an AccessDeniedException names them.
READ_ACTIONS = "ecr:DescribeRepositories, ecr:DescribeImages, ecr:GetLifecyclePolicy"
# Actions that remove an image from what a pull can reach (transition = archive storage).
REMOVING_ACTIONS = ("expire", "transition")


def expiring_rule(policy_text: object, tag: str) -> str | None:
    """The first rule of an ECR lifecycle policy that can remove a pinned build, described, or
    None. The build carries `tag` until AWS moves it, then none: rules with tagStatus
    `untagged` or `any` reach it, and so does a `tagged` rule whose prefixes or patterns match
    the tag (tests/ecr_lifecycle_model.py evaluates the full rules). A policy that cannot be
    read counts as one that may remove it."""
    try:
        rules = json.loads(policy_text)["rules"]  # type: ignore[arg-type]
        ordered = sorted(rules, key=lambda rule: float(rule["rulePriority"]))
    except (TypeError, ValueError, KeyError):
        return "a lifecycle policy that cannot be read"
    for rule in ordered:
        selection = rule.get("selection") if isinstance(rule, dict) else None
        action = rule.get("action") if isinstance(rule, dict) else None
        if not isinstance(selection, dict) or not isinstance(action, dict):
            return "a lifecycle rule that cannot be read"
        if action.get("type") in REMOVING_ACTIONS and _reaches(selection, tag):
            return (
                f"rule {rule['rulePriority']} ({selection.get('tagStatus')}, "
                f"{selection.get('countType')} {selection.get('countNumber')}, "
                f"{action.get('type')})"
            )
    return None


def _reaches(selection: dict[str, Any], tag: str) -> bool:
    status = selection.get("tagStatus")
    if status != "tagged":
        return True  # untagged, any, or a status this code does not know: assume the worst
    prefixes = selection.get("tagPrefixList") or []
    patterns = selection.get("tagPatternList") or []
    if not isinstance(prefixes, list) or not isinstance(patterns, list):
        return True
    return all(isinstance(p, str) and tag.startswith(p) for p in prefixes) and all(
        isinstance(p, str) and fnmatch.fnmatchcase(tag, p) for p in patterns
    )


def cache_repository_checks(ecr: Any, settings: Settings) -> list[Check]:
    """The cache repository as a leftover, the pinned build's presence, and its lifecycle."""
    repository = cache_repository(settings)
    cache_on = settings.serving.image_cache.enabled
    digest = settings.serving.image_digest if cache_on else None
    name = f"image cache repository {repository}"
    try:
        # An answer without the repository is no evidence that it exists (preflight's
        # _answered turns the KeyError into "cannot tell").
        if not ecr.describe_repositories(repositoryNames=[repository])["repositories"]:
            raise KeyError("repositories")
    except ClientError as error:
        code = error_code(error)
        if code != "RepositoryNotFoundException":
            return [refused(name, error)]
        if not cache_on:
            return [passed(name, "none left from an earlier deployment")]
        if digest:
            return [failed(name, "not created yet", _import_first(repository, settings))]
        return [passed(name, "not created yet: the first pull by tag creates it")]
    except BotoCoreError as error:
        return [undecided(name, f"AWS out of reach: {error}", "check the network and the region")]
    leftover = (
        "made by the pull-through cache, not by CloudFormation: it outlives `cdk destroy`; "
        f"delete it when unused: aws ecr delete-repository --repository-name {repository} --force"
    )
    if not cache_on:
        return [
            passed(name, f"left from an earlier deployment with serving.image_cache; {leftover}")
        ]
    checks = [passed(name, f"exists, reused by the cache; {leftover}")]
    if digest:
        checks.append(pinned_build(ecr, repository, digest, settings))
        checks.append(lifecycle_keeps_pinned(ecr, repository, settings.serving.image_tag))
    return checks


def pinned_build(
    ecr: Any,
    repository: str,
    digest: str,
    settings: Settings,
    *,
    registry_id: str | None = None,
    where: str = "the cache",
    missing_fix: str | None = None,
) -> Check:
    """The pinned build in the repository, pullable (not archived). ``registry_id``: another
    account's registry (a mirror); ``missing_fix``: what to do when it is absent."""
    name = f"pinned build {digest[:19]}… in {where}"
    fix = missing_fix or _import_first(repository, settings)
    registry = {"registryId": registry_id} if registry_id else {}
    try:
        response = ecr.describe_images(
            **registry, repositoryName=repository, imageIds=[{"imageDigest": digest}]
        )
    except ClientError as error:
        if error_code(error) == "ImageNotFoundException":
            return failed(name, f"not in {where}", fix)
        return refused(name, error)
    except BotoCoreError as error:
        return undecided(name, f"AWS out of reach: {error}", "check the network and the region")
    details = response.get("imageDetails") if isinstance(response, dict) else None
    found = [d for d in details or [] if isinstance(d, dict) and d.get("imageDigest") == digest]
    if not found:
        return failed(name, f"not in {where}", fix)
    status = found[0].get("imageStatus", "ACTIVE")
    if status != "ACTIVE":
        # ECR's ImageDetail.imageStatus: an ARCHIVED (or ACTIVATING) image cannot be pulled.
        owner = f" --registry-id {registry_id}" if registry_id else ""
        return failed(
            name,
            f"in {where} but {str(status)[:40]!r}: nodes cannot pull it",
            f"restore it: aws ecr update-image-storage-class{owner} --repository-name "
            f"{repository} --image-id imageDigest={digest} --target-storage-class STANDARD",
        )
    tags = found[0].get("imageTags")
    tags_text = ", ".join(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else ""
    return passed(name, f"present ({'tags: ' + tags_text if tags_text else 'untagged'})")


def lifecycle_keeps_pinned(
    ecr: Any, repository: str, tag: str, *, registry_id: str | None = None, where: str = "cache"
) -> Check:
    name = f"{where} lifecycle keeps the pinned build"
    registry = {"registryId": registry_id} if registry_id else {}
    try:
        response = ecr.get_lifecycle_policy(**registry, repositoryName=repository)
    except ClientError as error:
        if error_code(error) == "LifecyclePolicyNotFoundException":
            return passed(name, "no lifecycle policy: no build is ever expired")
        return refused(name, error)
    except BotoCoreError as error:
        return undecided(name, f"AWS out of reach: {error}", "check the network and the region")
    text = response.get("lifecyclePolicyText") if isinstance(response, dict) else None
    rule = expiring_rule(text, tag)
    if rule is None:
        return passed(name, "no rule reaches the pinned build")
    return failed(
        name,
        f"{rule} can remove the pinned build (untagged once AWS moves the tag); the "
        "repository keeps the policy it was created with",
        "aws ecr delete-lifecycle-policy"
        + (f" --registry-id {registry_id}" if registry_id else "")
        + f" --repository-name {repository}",
    )


def _import_first(repository: str, settings: Settings) -> str:
    registry = f"{settings.account or '<account>'}.dkr.ecr.{settings.region}.amazonaws.com"
    return (
        "the pull-through cache imports only on a pull by tag (aws/containers-roadmap#2837): "
        "deploy once without serving.image_digest, or `docker pull "
        f"{registry}/{repository}:{settings.serving.image_tag}`, then pin the digest "
        "`pdctl image` shows (a digest the tag no longer points to cannot be imported)"
    )


def refused(name: str, error: ClientError, read_actions: str = READ_ACTIONS) -> Check:
    """An answer about the repository fails the check; a refusal of the caller, throttling or a
    server error leaves it undecided (pdctl/aws_errors.py)."""
    if aws_errors.cannot_decide(error):
        return undecided(name, f"AWS did not answer: {_said(error)}", _fix_for(error, read_actions))
    return failed(name, _said(error), _fix_for(error, read_actions))


def _fix_for(error: ClientError, read_actions: str = READ_ACTIONS) -> str:
    if error_code(error) in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
        return f"allow {read_actions} on the repository"
    return "retry; if it persists, check the region and the ECR service health"


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _said(error: ClientError) -> str:
    details = error.response.get("Error", {})
    return f"{details.get('Code', 'error')}: {details.get('Message', '')}".rstrip(": ")
