"""Validators we did not write read the rendered manifests: the KubeRay v1.7.0 CRD schema (strict:
unknown fields fail), Ray Serve's ServeDeploySchema from the image's Ray version, the Kubernetes
OpenAPI schemas of the cluster's version (kubernetes-validate, strict), and checkov's kubernetes
framework."""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import importlib.util
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from ray.serve._private.config import DeploymentConfig
from ray.serve._private.request_router.request_router import FIFOMixin, RequestRouter
from ray.serve.schema import ServeDeploySchema

from app_config import load_settings
from catalog.eks_versions import KUBERNETES, RELEASES
from catalog.helm_charts import KUBERAY_OPERATOR
from catalog.ray_llm_image import IMAGES
from serving_manifests import ServingManifests
from serving_manifests.rayservice import POD_CHECKOV_SKIPS
from tests.checkov import run_checkov
from tests.configurations import CONFIGURATIONS, PROJECT_ROOT, context_for, render_deployed
from tests.kubernetes_schemas import ValidationError, validate_strictly
from tools.write_manifests import write_manifests

CRD_ENV = "KUBERAY_CRD"
# The CRD of the KubeRay release the stack installs, kept in the repository (its README gives the
# source and licence); KUBERAY_CRD points at another copy.
DEFAULT_CRD = (
    PROJECT_ROOT
    / "tests"
    / "data"
    / "schemas"
    / f"kuberay-v{KUBERAY_OPERATOR.version}"
    / "ray.io_rayservices.yaml"
)


@pytest.fixture(scope="module", params=list(CONFIGURATIONS))
def manifests(request: pytest.FixtureRequest) -> ServingManifests:
    return render_deployed(load_settings(context_for(request.param)))


def _strict(schema: Any) -> Any:
    """The CRD schema with additionalProperties: false wherever properties are listed and unknown
    fields are not explicitly preserved: what the API server's pruning does, as an error."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@functools.cache
def _read_crd(path: str) -> dict:
    """The CRD file (about 1.5 MB of YAML), read once per process with libyaml's safe loader:
    the same YAML 1.1 safe schema as yaml.safe_load, some ten times faster."""
    with open(path, encoding="utf-8") as text:
        return yaml.load(text, Loader=yaml.CSafeLoader)


@pytest.fixture(scope="module")
def rayservice_validator() -> jsonschema.Draft4Validator:
    path = os.environ.get(CRD_ENV) or str(DEFAULT_CRD)
    if not Path(path).is_file():
        pytest.fail(
            f"no KubeRay RayService CRD at {path}: the repository keeps the installed release's "
            f"under tests/data/schemas/; unset {CRD_ENV} or point it at a ray.io_rayservices.yaml"
        )
    crd = _read_crd(path)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft4Validator(_strict(version["schema"]["openAPIV3Schema"]))


def test_rayservice_matches_the_kuberay_crd_strictly(
    manifests: ServingManifests, rayservice_validator: jsonschema.Draft4Validator
) -> None:
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in rayservice_validator.iter_errors(manifests.rayservice)
    ]
    assert errors == []


def test_strict_crd_validation_rejects_unknown_fields(
    manifests: ServingManifests, rayservice_validator: jsonschema.Draft4Validator
) -> None:
    broken = copy.deepcopy(manifests.rayservice)
    broken["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["gpuCount"] = 8
    assert not rayservice_validator.is_valid(broken)


def test_the_kept_crd_is_the_installed_kuberay_releases() -> None:
    """The file under tests/data is KubeRay's RayService CRD of the chart version the serving
    stack installs, with its source and licence written beside it."""
    crd = _read_crd(str(DEFAULT_CRD))
    assert (crd["kind"], crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (
        "CustomResourceDefinition",
        "ray.io",
        "RayService",
    )
    readme = (DEFAULT_CRD.parent / "README.md").read_text()
    assert f"tag `v{KUBERAY_OPERATOR.version}`" in readme
    assert "Apache License 2.0" in readme


def test_the_pd_application_sets_no_proxy_field_that_newer_ray_removed(
    manifests: ServingManifests,
) -> None:
    """proxy_cls_config and proxy_deployment_config, ignored since Ray 2.55, are gone from the
    P/D builder in later Ray (ray-project/ray#65194): a config setting them would not load there."""
    (application,) = manifests.serve_config["applications"]
    assert not [key for key in application["args"] if key.startswith("proxy_")]


def test_ray_serve_schema_is_the_images_ray_version() -> None:
    assert {image.ray_version for image in IMAGES.values()} == {importlib.metadata.version("ray")}


def test_serve_config_matches_ray_serves_deploy_schema(manifests: ServingManifests) -> None:
    embedded = yaml.safe_load(manifests.rayservice["spec"]["serveConfigV2"])
    schema = ServeDeploySchema.model_validate(embedded)
    assert [app.import_path for app in schema.applications] == ["ray.serve.llm:build_pd_openai_app"]


def test_ray_serve_schema_rejects_a_malformed_config(manifests: ServingManifests) -> None:
    broken = copy.deepcopy(manifests.serve_config)
    del broken["applications"][0]["import_path"]
    with pytest.raises(ValueError, match="import_path"):
        ServeDeploySchema.model_validate(broken)


NATIVE_API_GROUPS = ("v1", "networking.k8s.io/v1")


def _native(manifests: ServingManifests) -> list[dict[str, Any]]:
    return [m for m in manifests.all() if m["apiVersion"] in NATIVE_API_GROUPS]


@pytest.mark.parametrize("minor", sorted(RELEASES))
def test_native_objects_match_kubernetes_schemas_strictly(
    manifests: ServingManifests, minor: str
) -> None:
    """On every offered minor: the manifests do not depend on the configured one."""
    objects = _native(manifests)
    assert {o["kind"] for o in objects} >= {"Namespace", "ServiceAccount", "NetworkPolicy"}
    for document in objects:
        validate_strictly(document, minor)


def test_strict_kubernetes_validation_rejects_unknown_fields(manifests: ServingManifests) -> None:
    broken = copy.deepcopy(manifests.network_policies[0])
    broken["spec"]["podSelectors"] = {}
    with pytest.raises(ValidationError):
        validate_strictly(broken, KUBERNETES.minor)


def _pods(manifests: ServingManifests) -> list[dict[str, Any]]:
    """The RayService's pod templates as Pods: checkov does not read RayService itself. The
    RayService's checkov.io/skip<N> annotations go on every pod (no pod mounts an API token in
    its containers, so no skip is the head's alone)."""
    metadata = manifests.rayservice["metadata"]
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    templates = {"head": cluster["headGroupSpec"]["template"]}
    templates |= {group["groupName"]: group["template"] for group in cluster["workerGroupSpecs"]}
    skips = {k: v for k, v in metadata["annotations"].items() if k.startswith("checkov.io/skip")}
    pods = []
    for name, template in templates.items():
        annotations = {
            **template["metadata"].get("annotations", {}),
            **skips,
        }
        pod_metadata = {**template["metadata"], "annotations": annotations}
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": metadata["namespace"], **pod_metadata},
                "spec": template["spec"],
            }
        )
    return pods


def test_checkov_kubernetes_has_no_unskipped_failures(tmp_path: Path) -> None:
    manifests = render_deployed(load_settings(context_for("public-endpoint")))
    assert write_manifests(manifests, tmp_path)
    for pod in _pods(manifests):
        (tmp_path / f"pod-{pod['metadata']['name']}.yaml").write_text(yaml.safe_dump(pod))
    result = run_checkov(tmp_path, "kubernetes")
    assert result.failed == [], result.stderr
    assert result.passed > 20, "checkov evaluated too little"
    # Each reasoned skip on each of 3 pods; none for service-account tokens (none automounted).
    assert result.skipped == 3 * len(POD_CHECKOV_SKIPS)


def test_each_sides_deployment_options_pass_serves_own_validation(
    manifests: ServingManifests,
) -> None:
    """What LLMConfig.validate_deployment_config runs (Ray 2.58), without importing ray.llm,
    which needs pyarrow: health checks, graceful shutdown and the request router included
    (RequestRouterConfig imports the router's class and pickles its module, as Serve does when
    it builds the application)."""
    (application,) = manifests.serve_config["applications"]
    for side in ("prefill_config", "decode_config"):
        config = DeploymentConfig(**application["args"][side]["deployment_config"])
        assert config.autoscaling_config.target_ongoing_requests < 1e9  # Serve LLM's default
        assert config.health_check_timeout_s > config.health_check_period_s
        assert config.graceful_shutdown_timeout_s >= 60  # streams in flight may finish
        router = config.request_router_config.get_request_router_class()
        assert issubclass(router, RequestRouter), (side, router)
        # Serve's routing tasks rely on FIFO fulfilment (serve_extensions/prefix_router.py).
        assert issubclass(router, FIFOMixin), (side, router)
