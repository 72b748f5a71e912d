"""The app's own Serve code (the serve_extensions package) as a ConfigMap on every Ray pod.

Why a ConfigMap mounted on PYTHONPATH, not Serve's ``runtime_env`` (docs/architecture.md, "The
app's code in the Ray cluster"): Serve imports the request router in the process that builds the
application and, by reference, in every process holding a handle to the side (decode replicas
for prefill, ingress replicas for decode): the code must be importable on every Ray node before
Serve starts, whichever node runs what. In a Serve config, ``runtime_env`` may name only remote
URIs in ``working_dir`` and ``py_modules`` (Ray 2.58 ray/serve/schema.py, RayActorOptionsSchema
and ServeApplicationSchema validators): an S3 zip, so another bucket, IAM grant and artifact to
version, downloaded by every node at runtime; and a deployment's runtime_env does not reach the
processes of other deployments that import the router. A ConfigMap travels with the manifests
the stack applies, needs no new permission (the pods read their own volume) and nothing in the
image: the image sets no PYTHONPATH of its own (aws/deep-learning-containers
docker/ray_llm/Dockerfile.cuda: its ENV sets PATH, LD_LIBRARY_PATH, PYTHONDONTWRITEBYTECODE=1,
so nothing writes .pyc into the read-only mount), so the container's PYTHONPATH is ours.

Versioning: the ConfigMap is immutable and named by a digest of the package's files. A change of
the package is a new ConfigMap and a new name in every pod template, so KubeRay 1.7 sees a
``rayClusterConfig`` change and, with ``upgrade_strategy: NewCluster``, starts a new Ray cluster
with the new code while the old one serves with the old (a pod never mixes versions; a restarted
pod of the old cluster still finds its own ConfigMap, kept by the stack: see ``PdRayService``).
With ``upgrade_strategy: None`` the running pods keep their mount: like an image change, a
package change then needs the pods restarted.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import serve_extensions
from app_config import Settings
from serving_manifests.names import RAYSERVICE_LABEL

PACKAGE = serve_extensions.__name__
PACKAGE_DIR = Path(serve_extensions.__file__).resolve().parent
# Where the package's folder appears in the Ray containers; this folder is their PYTHONPATH.
MOUNT_ROOT = "/opt/llm-serving/python"
VOLUME = "serve-extensions"
# Kubernetes: "The data stored in a ConfigMap cannot exceed 1 MiB" (concepts/configuration/
# configmap); the API server's object limit (etcd's request limit, 1.5 MiB) covers it.
CONFIGMAP_DATA_LIMIT_BYTES = 1024 * 1024
DIGEST_CHARS = 10
# The class serve_config.py names for serving.<side>.request_router = prefix_affinity.
PREFIX_ROUTER = f"{PACKAGE}.prefix_router:PrefixAffinityRouter"
# The application-level autoscaling policy serve_config.py names for serving.scaling.policy =
# latency.
LATENCY_POLICY = f"{PACKAGE}.latency_autoscaler:LatencyObjectivePolicy"
# The application's builder under serving.scaling.policy = latency: Ray's P/D builder with servers
# that report the latency the policy reads (the queue policy keeps Ray's builder).
LATENCY_BUILDER = f"{PACKAGE}.pd_builder:build_pd_openai_app"


def package_files() -> dict[str, str]:
    """Every module of the package by file name (flat: ConfigMap keys cannot hold '/')."""
    files = {path.name: path.read_text() for path in sorted(PACKAGE_DIR.glob("*.py"))}
    size = sum(len(text.encode()) for text in files.values())
    if size > CONFIGMAP_DATA_LIMIT_BYTES:
        raise ValueError(
            f"{PACKAGE}/ is {size} bytes; a ConfigMap holds at most {CONFIGMAP_DATA_LIMIT_BYTES}"
        )
    return files


def package_digest(files: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name, text in sorted(files.items()):
        digest.update(f"{name}\0{text}\0".encode())
    return digest.hexdigest()[:DIGEST_CHARS]


def configmap_name(settings: Settings, files: dict[str, str]) -> str:
    return f"{settings.serving.name}-serve-extensions-{package_digest(files)}"


def render_serve_extensions(settings: Settings) -> dict[str, Any]:
    files = package_files()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(settings, files),
            "namespace": settings.serving.namespace,
            "labels": {
                RAYSERVICE_LABEL: settings.serving.name,
                "app.kubernetes.io/name": PACKAGE.replace("_", "-"),
                "app.kubernetes.io/version": package_digest(files),
            },
        },
        # Never edited in place: a change is a new name (and a new Ray cluster).
        "immutable": True,
        "data": files,
    }


def mount_serve_extensions(
    pod_spec: dict[str, Any], container: dict[str, Any], configmap: dict[str, Any]
) -> None:
    """The package at MOUNT_ROOT/serve_extensions/, read-only, and MOUNT_ROOT on PYTHONPATH."""
    pod_spec.setdefault("volumes", []).append(
        {
            "name": VOLUME,
            "configMap": {
                "name": configmap["metadata"]["name"],
                "items": [
                    {"key": name, "path": f"{PACKAGE}/{name}"} for name in sorted(configmap["data"])
                ],
            },
        }
    )
    container.setdefault("volumeMounts", []).append(
        {"name": VOLUME, "mountPath": MOUNT_ROOT, "readOnly": True}
    )
    container.setdefault("env", []).append({"name": "PYTHONPATH", "value": MOUNT_ROOT})
