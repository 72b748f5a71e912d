"""What ECR or Amazon Inspector found in the image the pods pull, read from the account's image
cache (serving.image_cache). AWS's DLC registry is another account's: its scan results are not
readable from yours, which is why the cache exists."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from app_config import Settings
from serving_manifests.image import cache_repository

# Severities as ECR reports them, worst first (basic and enhanced scanning alike).
SEVERITIES = ("CRITICAL", "HIGH", "MEDIUM", "LOW", "INFORMATIONAL", "UNDEFINED", "UNTRIAGED")
# A scan that is done and readable: basic scans end COMPLETE; enhanced (continuous) ones stay
# ACTIVE while Inspector keeps rescanning.
READABLE = ("COMPLETE", "ACTIVE")


@dataclass(frozen=True)
class ScanSummary:
    repository: str
    status: str  # ECR's imageScanStatus.status, or what stopped us from reading it
    description: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # severity -> findings

    @property
    def verdict(self) -> str:
        if self.status not in READABLE:
            return f"no scan result: {self.status} {self.description}".strip()
        serious = {s: self.counts[s] for s in ("CRITICAL", "HIGH") if self.counts.get(s)}
        if serious:
            found = ", ".join(f"{n} {s.lower()}" for s, n in serious.items())
            return (
                f"{found} findings: read them in the ECR console or `aws ecr "
                f"describe-image-scan-findings`; a newer build of the tag may fix them "
                "(pdctl image)"
            )
        return "no critical or high findings"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def scan_summary(ecr: Any, settings: Settings, account: str) -> ScanSummary:
    """The scan of the configured tag (or pinned digest) in the account's cache repository."""
    repository = cache_repository(settings)
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
        code = error.response.get("Error", {}).get("Code", "")
        hint = {
            "RepositoryNotFoundException": "the cache has not pulled the image yet (first pod "
            "start creates the repository)",
            "ImageNotFoundException": "this tag or digest is not in the cache yet",
            "ScanNotFoundException": "no scan yet: check the registry's scanning configuration "
            "(serving.image_cache.scanning)",
        }.get(code, str(error))
        return ScanSummary(repository, code or "error", hint)
    except BotoCoreError as error:
        return ScanSummary(repository, "error", str(error))
    status = response.get("imageScanStatus", {})
    findings = response.get("imageScanFindings", {})
    counts = findings.get("findingSeverityCounts", {})
    return ScanSummary(
        repository,
        status.get("status", "unknown"),
        status.get("description", ""),
        {severity: counts[severity] for severity in SEVERITIES if severity in counts},
    )
