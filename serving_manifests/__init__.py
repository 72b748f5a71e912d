"""Kubernetes manifests of the serving stack: plain YAML under manifests/, filled in structurally
from the configuration by small pure functions (no string templating of YAML)."""

from serving_manifests.render import ServingManifests, render

__all__ = ["ServingManifests", "render"]
