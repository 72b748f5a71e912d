"""What ECR or Amazon Inspector found in the image the pods pull, read from the account's image
cache (serving.image_cache) or from an ECR mirror (serving.image_mirror). AWS's DLC registry is
another account's: its scan results are not readable from yours, which is why the cache exists.

The answer is AWS's and is read defensively: a verdict of "no critical or high findings" needs a
scan that is done and readable and a severity count that is present and well-formed; anything
else is a status line that says what is missing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from app_config import Settings
from serving_manifests.image import cache_repository

# Severities as ECR reports them, worst first (basic and enhanced scanning alike).
SEVERITIES = ("CRITICAL", "HIGH", "MEDIUM", "LOW", "INFORMATIONAL", "UNDEFINED", "UNTRIAGED")
SERIOUS = ("CRITICAL", "HIGH")
# A scan that is done and readable: basic scans end COMPLETE; enhanced (continuous) ones stay
# ACTIVE while Inspector keeps rescanning.
READABLE = ("COMPLETE", "ACTIVE")
# Reading enhanced findings through ECR also needs Inspector's permission (ECR user guide,
# "Required IAM permissions for enhanced scanning").
PERMISSIONS = "ecr:DescribeImageScanFindings and, with enhanced scanning, inspector2:ListFindings"
# ECR's imageScanStatus.status values (botocore's ECR model, ScanStatus) that are not a result.
STATUS_HINTS = {
    "IN_PROGRESS": "the scan is running; ask again in a few minutes",
    "PENDING": "the scan has not started yet; ask again in a few minutes",
    "SCAN_ELIGIBILITY_EXPIRED": (
        "Amazon Inspector stopped rescanning this build: it was not pushed, pulled or in use "
        "within the account's ECR re-scan durations (14 days by default for new accounts), and "
        "its findings are closed, not current. A cached build is never pushed again: lengthen "
        "the pull-date durations (`aws inspector2 update-configuration --ecr-configuration "
        "rescanDuration=...,pullDateRescanDuration=...,pullDateRescanMode=LAST_IN_USE_AT`); "
        "Inspector does not say that a later pull makes an inactive image scan again"
    ),
    "FINDINGS_UNAVAILABLE": "Amazon Inspector has no findings for this image (yet)",
    "UNSUPPORTED_IMAGE": "the scanner does not support this image's OS or format",
    "LIMIT_EXCEEDED": "the account's scan limit was reached; findings are not available",
    "IMAGE_ARCHIVED": "the image is in archive storage; restore it to scan it",
    "IMAGE_SIZE_EXCEEDED": "the image is larger than the scanner accepts",
    "FAILED": "the scan failed (see its description)",
}
ERROR_HINTS = {
    "RepositoryNotFoundException": "no such repository: the cache has not pulled the image yet "
    "(the first pull by tag creates the repository), or the mirror's name is wrong",
    "ImageNotFoundException": "this tag or digest is not in the repository yet",
    "ScanNotFoundException": "no scan yet: check the registry's scanning configuration "
    "(serving.image_cache.scanning, or the mirror's registry)",
    "AccessDeniedException": f"not allowed: reading the scan needs {PERMISSIONS}",
}


@dataclass(frozen=True)
class ScanSummary:
    repository: str
    status: str  # ECR's imageScanStatus.status, or what stopped us from reading it
    description: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # severity -> findings
    # Why the answer cannot be judged although its status is readable ("" when it can).
    unreadable: str = ""

    @property
    def verdict(self) -> str:
        if self.status not in READABLE:
            hint = STATUS_HINTS.get(self.status, "")
            return " ".join(
                part for part in ("no scan result:", self.status, self.description, hint) if part
            ).replace("\n", " ")
        if self.unreadable:
            return f"cannot judge the scan: {self.unreadable}"
        serious = {s: self.counts[s] for s in SERIOUS if self.counts.get(s)}
        if serious:
            found = ", ".join(f"{n} {s.lower()}" for s, n in serious.items())
            return (
                f"{found} findings: read them in the ECR console or `aws ecr "
                f"describe-image-scan-findings`; a newer build of the tag may fix them "
                "(pdctl image)"
            )
        return "no critical or high findings"

    @property
    def inconclusive(self) -> bool:
        """A finished scan whose findings cannot be read: "cannot judge", exit 2."""
        return self.status in READABLE and bool(self.unreadable)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict, "inconclusive": self.inconclusive}


def scan_summary(
    ecr: Any, settings: Settings, account: str, repository: str | None = None
) -> ScanSummary:
    """The scan of the configured tag (or pinned digest) in the account's cache repository, or
    in ``repository`` of the registry ``account`` (an ECR mirror)."""
    repository = repository or cache_repository(settings)
    serving = settings.serving
    image_id = (
        {"imageDigest": serving.image_digest}
        if serving.image_digest
        else {"imageTag": serving.image_tag}
    )
    try:
        response = ecr.describe_image_scan_findings(
            registryId=account, repositoryName=repository, imageId=image_id, maxResults=1
        )
    except ClientError as error:
        details = error.response.get("Error", {})
        code = str(details.get("Code", "") or "error")
        hint = ERROR_HINTS.get(code) or _one_line(details.get("Message")) or code
        return ScanSummary(repository, code, hint)
    except BotoCoreError as error:
        return ScanSummary(repository, "error", _one_line(str(error)))
    return summarize(repository, response)


def summarize(repository: str, response: object) -> ScanSummary:
    """A DescribeImageScanFindings answer, whatever its shape, as a summary."""
    if not isinstance(response, dict):
        return ScanSummary(repository, "unreadable", "the answer is not an object")
    status = response.get("imageScanStatus")
    if not isinstance(status, dict) or not isinstance(status.get("status"), str):
        return ScanSummary(repository, "unknown", "the answer carries no scan status")
    code = _one_line(status["status"])
    description = _one_line(status.get("description"))
    findings = response.get("imageScanFindings")
    if not isinstance(findings, dict):
        return ScanSummary(repository, code, description, unreadable="no findings in the answer")
    raw = findings.get("findingSeverityCounts")
    if raw is None and _explicitly_empty(findings) and not response.get("nextToken"):
        # Counts left out, but the answer lists its findings and the list is empty: that is
        # the evidence of a clean scan. A missing list is not, and neither is an empty page
        # with a nextToken (the API is paginated; Inspector can return empty pages that
        # continue).
        raw = {}
    if not isinstance(raw, dict):
        return ScanSummary(
            repository, code, description, unreadable="the severity counts are not a mapping"
        )
    counts: dict[str, int] = {}
    for severity, count in raw.items():
        if not _is_count(count):
            return ScanSummary(
                repository,
                code,
                description,
                unreadable=f"the {_one_line(severity)} count is {_one_line(repr(count))}",
            )
        counts[_one_line(severity).upper()] = int(count)
    ordered = {s: counts[s] for s in SEVERITIES if s in counts}
    ordered |= {s: n for s, n in counts.items() if s not in ordered}  # severities ECR adds later
    return ScanSummary(repository, code, description, ordered)


def _explicitly_empty(findings: dict[str, Any]) -> bool:
    lists = [findings.get(key) for key in ("findings", "enhancedFindings") if key in findings]
    return bool(lists) and all(isinstance(found, list) and not found for found in lists)


def _is_count(value: object) -> bool:
    """A finite, non-negative whole number (bool is an int in Python, and is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value >= 0 and float(value).is_integer()


def _one_line(text: object, limit: int = 300) -> str:
    """Text from AWS as one plain line, bounded."""
    if text is None:
        return ""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
