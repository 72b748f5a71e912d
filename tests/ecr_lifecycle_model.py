"""Amazon ECR's lifecycle policy evaluation, as the ECR user guide documents it ("Lifecycle policy
properties in Amazon ECR" and "How lifecycle policies work", checked 2026-12-01):

- rules apply in rulePriority order, lowest first; priorities are unique; a rule with tagStatus
  `any` must have the highest priority; only one rule may select untagged images; a `tagged`
  rule names tagPrefixList or tagPatternList;
- an image is expired by exactly one or zero rules: an image that matches the tagging
  requirements of a higher-priority rule cannot be expired by a lower-priority one, but
  lower rules still count it as if it had not been expired;
- a tag list matches when every entry matches one of the image's tags (prefix, or `*` wildcard);
- imageCountMoreThan: the rule's images sorted youngest to oldest by push time, all beyond the
  count expire; sinceImagePushed / sinceImagePulled: older than countNumber days.

Both actions count as losing the image: `expire` deletes it, and an image moved to archive
storage by `transition` cannot be pulled until it is restored.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from catalog.ray_llm_image import DEFAULT_IMAGE_TAG

# The lifecycle policy an earlier creation template of this project gave the cache's
# repositories: untagged (superseded) builds expired 7 days after their push.
FORMER_SEVEN_DAY_POLICY: dict[str, Any] = {
    "rules": [
        {
            "rulePriority": 1,
            "selection": {
                "tagStatus": "untagged",
                "countType": "sinceImagePushed",
                "countUnit": "days",
                "countNumber": 7,
            },
            "action": {"type": "expire"},
        }
    ]
}


@dataclass(frozen=True)
class CachedImage:
    digest: str
    pushed_at: datetime
    tags: frozenset[str] = field(default_factory=frozenset)
    last_pulled_at: datetime | None = None


def validate(policy: dict[str, Any]) -> None:
    """Raise ValueError where ECR's PutLifecyclePolicy would refuse the policy."""
    rules = policy["rules"]
    priorities = [rule["rulePriority"] for rule in rules]
    if len(set(priorities)) != len(priorities):
        raise ValueError("rule priorities must be unique")
    statuses = [rule["selection"]["tagStatus"] for rule in rules]
    if statuses.count("untagged") > 1:
        raise ValueError("only one rule may select untagged images")
    highest = max(priorities)
    for rule in rules:
        selection = rule["selection"]
        if selection["tagStatus"] == "any" and rule["rulePriority"] != highest:
            raise ValueError("a tagStatus 'any' rule must have the highest priority")
        if selection["tagStatus"] == "tagged" and not (
            selection.get("tagPrefixList") or selection.get("tagPatternList")
        ):
            raise ValueError("a tagged rule needs tagPrefixList or tagPatternList")


def _matches_tags(selection: dict[str, Any], image: CachedImage) -> bool:
    status = selection["tagStatus"]
    if status == "any":
        return True
    if status == "untagged":
        return not image.tags
    if not image.tags:
        return False
    prefixes = selection.get("tagPrefixList") or []
    patterns = selection.get("tagPatternList") or []
    return all(any(tag.startswith(p) for tag in image.tags) for p in prefixes) and all(
        any(fnmatch.fnmatchcase(tag, p) for tag in image.tags) for p in patterns
    )


def _selected(selection: dict[str, Any], images: list[CachedImage], now: datetime) -> set[str]:
    """Digests the rule's count criterion picks among the images its tags match."""
    number = selection["countNumber"]
    kind = selection["countType"]
    if kind == "imageCountMoreThan":
        youngest_first = sorted(images, key=lambda image: image.pushed_at, reverse=True)
        return {image.digest for image in youngest_first[number:]}
    age = timedelta(days=number)
    if kind == "sinceImagePushed":
        return {image.digest for image in images if now - image.pushed_at > age}
    if kind == "sinceImagePulled":
        return {
            image.digest
            for image in images
            if now - (image.last_pulled_at or image.pushed_at) > age
        }
    raise ValueError(f"countType {kind!r} is not modelled")


def expired(policy: dict[str, Any] | None, images: list[CachedImage], now: datetime) -> set[str]:
    """Digests one evaluation of the policy removes."""
    if not policy:
        return set()
    validate(policy)
    removed: set[str] = set()
    claimed: set[str] = set()  # matched the tagging requirements of a higher-priority rule
    for rule in sorted(policy["rules"], key=lambda rule: rule["rulePriority"]):
        selection = rule["selection"]
        matching = [image for image in images if _matches_tags(selection, image)]
        if rule["action"]["type"] in ("expire", "transition"):
            removed |= _selected(selection, matching, now) - claimed
        claimed |= {image.digest for image in matching}
    return removed


def day_pinned_build_is_lost(
    policy: dict[str, Any] | None,
    start: datetime,
    republish_days: list[int],
    horizon_days: int,
    tag: str = DEFAULT_IMAGE_TAG,
) -> int | None:
    """A cache repository over time: on day 0 the first build is imported under the tag and a
    cluster pins its digest; on each republish day AWS moves the tag and the cache imports the
    new build (the previous one becomes untagged). The cluster's nodes pulled once (IfNotPresent)
    and never again. ECR evaluates the policy once a day. Returns the first day the pinned build
    is gone, or None if it survives the horizon."""
    pinned = "sha256:" + "0" * 64
    images = [CachedImage(pinned, start, frozenset({tag}), last_pulled_at=start)]
    for day in range(1, horizon_days + 1):
        now = start + timedelta(days=day)
        if day in republish_days:
            images = [
                CachedImage(i.digest, i.pushed_at, frozenset(), i.last_pulled_at) for i in images
            ]
            images.append(CachedImage(f"sha256:{day:064x}", now, frozenset({tag}), now))
        gone = expired(policy, images, now)
        if pinned in gone:
            return day
        images = [image for image in images if image.digest not in gone]
    return None
