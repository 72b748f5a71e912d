"""What `cdk synth` wrote into cdk.out for the Ray cluster: the RayService the serving stack
applies, read from the template's kubectl manifest, so the check runs the synthesized config."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


def _text(value: Any) -> str:
    """A CloudFormation string; tokens (the role ARN, the account) stay as <token>: the Serve
    config holds none."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_text(part) for part in parts)
    return "<token>"


@dataclass(frozen=True)
class DeployedRayService:
    manifest: dict[str, Any]

    @classmethod
    def read(cls, cdk_out: Path) -> DeployedRayService:
        found = []
        for template in sorted(cdk_out.glob("*.template.json")):
            for resource in json.loads(template.read_text())["Resources"].values():
                manifest = resource.get("Properties", {}).get("Manifest")
                if manifest is not None:
                    documents = json.loads(_text(manifest))
                    found += [doc for doc in documents if doc.get("kind") == "RayService"]
        if len(found) != 1:
            raise LookupError(
                f"{cdk_out}: expected one RayService, found {len(found)}; run `make synth`"
            )
        return cls(found[0])

    @property
    def serve_config(self) -> dict[str, Any]:
        return yaml.safe_load(self.manifest["spec"]["serveConfigV2"])

    @property
    def head_start_params(self) -> dict[str, str]:
        return dict(self.manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"])

    def worker_resources(self, group: str) -> dict[str, float]:
        """The custom Ray resources a worker group advertises (one unit per GPU of its pod)."""
        for spec in self.manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
            if spec["groupName"] == group:
                return {key: float(value) for key, value in (spec.get("resources") or {}).items()}
        raise LookupError(f"no worker group {group!r} in the RayService")
