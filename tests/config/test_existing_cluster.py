"""An existing cluster (cluster.existing): what synth checks without an account, as a table
(the setting changed -> the rule's code and the setting it names), and what the add-on choices
accept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app_config import ConfigError
from app_config.model import CREATED_CLUSTER_SETTINGS, Cluster
from app_config.rules import evaluate, warnings
from catalog.eks_versions import RELEASES
from catalog.helm_charts import (
    ADDON_FLOORS,
    KUBERAY_OPERATOR,
    NVIDIA_MOFED_BY_DEFAULT,
    efa_device_plugin_floor,
)
from tests.configurations import PROJECT_ROOT, refusals, render_deployed, settings_for

CONFIGURATION = "existing-cluster"
EXAMPLE = yaml.safe_load((PROJECT_ROOT / "examples" / f"{CONFIGURATION}.yaml").read_text())
GIVEN = EXAMPLE["cluster"]["existing"]
ISSUER_ID = "5A1B2C3D4E5F60718293A4B5C6D7E8F9"
REAL = {
    "cluster.existing.endpoint": f"https://{ISSUER_ID}.gr7.us-west-2.eks.amazonaws.com",
    "cluster.existing.oidc_provider_arn": "arn:aws:iam::409387615243:oidc-provider/"
    f"oidc.eks.us-west-2.amazonaws.com/id/{ISSUER_ID}",
}
MINOR = EXAMPLE["cluster"]["kubernetes_version"]


def _addon(name: str, **choice: str) -> dict[str, str]:
    return {f"cluster.existing.addons.{name}": json.dumps(choice)}


def _older(version: str) -> str:
    major, minor, *_ = version.lstrip("v").split(".")
    return f"{major}.{int(minor) - 1}.0" if int(minor) else f"{int(major) - 1}.99.0"


# The oldest release each add-on the owner may run must be, for the example's configuration
# (the EFA device plugin's follows its GPU instance types; the NVIDIA plugin has none).
FLOORS = {
    **{name: floor.minimum for name, floor in ADDON_FLOORS.items() if floor.minimum},
    "efa_device_plugin": efa_device_plugin_floor(
        [EXAMPLE["gpu_nodes"][side]["instance_type"] for side in ("prefill", "decode")]
    ).minimum,
}

OWNER_TOKEN = "arn:aws:lambda:us-west-2:409387615243:function:platform-kubectl-onEvent"
OWNER_ROLE = "arn:aws:iam::409387615243:role/platform-kubectl-handler"


def _provider(**change: str) -> dict[str, str]:
    """cluster.existing.kubectl_provider: the owner's, with ``change`` applied."""
    provider = {"service_token": OWNER_TOKEN, "role_arn": OWNER_ROLE, **change}
    return {"cluster.existing.kubectl_provider": json.dumps(provider)}


OTHER_MINOR = next(minor for minor in RELEASES if minor != MINOR)

# (overrides of the example, the rule's code, the setting the finding names)
REFUSED = [
    (
        {"cluster.existing.cluster_security_group_id": "sg-12345"},
        "existing-cluster-ids",
        "cluster.existing.cluster_security_group_id",
    ),
    (
        {"cluster.existing.oidc_provider_arn": "arn:aws:iam::111122223333:oidc-provider/x"},
        "existing-cluster-ids",
        "cluster.existing.oidc_provider_arn",
    ),
    (
        {
            "cluster.existing.oidc_provider_arn": REAL[
                "cluster.existing.oidc_provider_arn"
            ].replace("us-west-2", "eu-west-1")
        },
        "existing-cluster-ids",
        "cluster.existing.oidc_provider_arn",
    ),
    (
        {**REAL, "account": "444455556666"},
        "existing-cluster-ids",
        "cluster.existing.oidc_provider_arn",
    ),
    (
        {"cluster.existing.endpoint": "https://platform-prod.example.com"},
        "existing-cluster-ids",
        "cluster.existing.endpoint",
    ),
    (
        {
            "cluster.existing.endpoint": REAL["cluster.existing.endpoint"].replace(
                "us-west-2", "us-east-1"
            )
        },
        "existing-cluster-ids",
        "cluster.existing.endpoint",
    ),
    (  # the provider of another cluster's issuer
        {
            **REAL,
            "cluster.existing.endpoint": REAL["cluster.existing.endpoint"].replace(
                ISSUER_ID, "F" * 32
            ),
        },
        "existing-cluster-ids",
        "cluster.existing.oidc_provider_arn",
    ),
    (
        {
            "cluster.endpoint_access": "public_and_private",
            "cluster.public_access_cidrs": '["203.0.113.0/24"]',
        },
        "existing-cluster-created-only",
        "cluster.endpoint_access",
    ),
    (
        {
            "cluster.endpoint_access": "public_and_private",
            "cluster.public_access_cidrs": '["203.0.113.0/24"]',
        },
        "existing-cluster-created-only",
        "cluster.public_access_cidrs",
    ),
    ({"cluster.support_type": "EXTENDED"}, "existing-cluster-created-only", "cluster.support_type"),
    (
        {"cluster.control_plane_log_retention_days": "30"},
        "existing-cluster-created-only",
        "cluster.control_plane_log_retention_days",
    ),
    (
        _addon("kuberay", source="installed"),
        "existing-cluster-addons",
        "cluster.existing.addons.kuberay.version",
    ),
    *[
        (
            _addon(name, source="installed", version=_older(floor)),
            "existing-cluster-addons",
            f"cluster.existing.addons.{name}.version",
        )
        for name, floor in FLOORS.items()
    ],
    (
        _addon(
            "cluster_autoscaler",
            source="installed",
            version=RELEASES[OTHER_MINOR].cluster_autoscaler_image_tag,
        ),
        "existing-cluster-addons",
        "cluster.existing.addons.cluster_autoscaler.version",
    ),
    (
        _addon("efa_device_plugin", source="install", version="0.5.20"),
        "existing-cluster-addons",
        "cluster.existing.addons.efa_device_plugin.version",
    ),
    (
        _provider(service_token="arn:aws:lambda:us-west-2:409387615243:layer:kubectl"),
        "existing-cluster-kubectl",
        "cluster.existing.kubectl_provider.service_token",
    ),
    (
        _provider(service_token=OWNER_TOKEN.replace("us-west-2", "eu-west-1")),
        "existing-cluster-kubectl",
        "cluster.existing.kubectl_provider.service_token",
    ),
    (
        _provider(role_arn="arn:aws:iam::409387615243:user/kubectl"),
        "existing-cluster-kubectl",
        "cluster.existing.kubectl_provider.role_arn",
    ),
    (
        {**_provider(), "account": "240318571604"},
        "existing-cluster-kubectl",
        "cluster.existing.kubectl_provider.role_arn",
    ),
    (
        _addon("kuberay", source="install", namespace="ray-system"),
        "existing-cluster-addons",
        "cluster.existing.addons.kuberay.namespace",
    ),
    (  # the example's KubeRay runs in ray-system: the app would label, lock and delete it
        {"serving.namespace": "ray-system"},
        "existing-cluster-serving-namespace",
        "serving.namespace",
    ),
]


@pytest.mark.parametrize(("overrides", "code", "path"), REFUSED)
def test_an_existing_cluster_that_cannot_be_right_is_refused_naming_the_setting(
    overrides: dict[str, str], code: str, path: str
) -> None:
    found = [(problem.code, problem.path) for problem in refusals(CONFIGURATION, **overrides)]
    assert (code, path) in found


def test_every_setting_of_a_created_control_plane_has_a_row() -> None:
    refused = {path for _, code, path in REFUSED if code == "existing-cluster-created-only"}
    # allow_public_access_from_anywhere: the same loop; it needs 0.0.0.0/0 to change at all
    assert refused | {"cluster.allow_public_access_from_anywhere"} == {
        f"cluster.{name}" for name in CREATED_CLUSTER_SETTINGS
    }
    assert all(name in Cluster.model_fields for name in CREATED_CLUSTER_SETTINGS)


def _example_file(tmp_path: Path, change: dict) -> str:
    example = yaml.safe_load(yaml.safe_dump(EXAMPLE))
    for dotted, value in change.items():
        *parents, key = dotted.split(".")
        section = example
        for part in parents:
            section = section[part]
        if value is None:
            del section[key]
        else:
            section[key] = value
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(example))
    return str(path)


@pytest.mark.parametrize(
    ("change", "code", "path"),
    [
        ({"cluster.name": None}, "existing-cluster-ids", "cluster.name"),
        ({"network": {"availability_zones": ["usw2-az1", "usw2-az2"]}}, "existing-cluster-vpc",
         "cluster.existing"),
    ],
)  # fmt: skip
def test_an_existing_cluster_needs_its_name_and_its_vpc(
    tmp_path: Path, change: dict, code: str, path: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_for(CONFIGURATION, config=_example_file(tmp_path, change))
    assert (code, path) in [(problem.code, problem.path) for problem in raised.value.problems]


@pytest.mark.parametrize(
    "overrides",
    [
        *[_addon(name, source="installed", version=floor) for name, floor in FLOORS.items()],
        _addon("nvidia_device_plugin", source="installed", version="0.14.0"),
        _addon("cluster_autoscaler", source="installed",
               version=RELEASES[MINOR].cluster_autoscaler_image_tag),
        _addon("kuberay", source="install"),
    ],
)  # fmt: skip
def test_an_add_on_at_the_version_the_app_needs_is_accepted(overrides: dict[str, str]) -> None:
    ((setting, choice),) = overrides.items()
    addons = settings_for(CONFIGURATION, **overrides).cluster.existing.addons
    assert getattr(addons, setting.rpartition(".")[2]).model_dump() == {
        "version": None,
        "namespace": None,
        **json.loads(choice),
    }


@pytest.mark.parametrize(
    ("kuberay", "expected"),
    [
        (None, "ray-system"),  # the example's: installed there
        ('{"source": "installed", "version": "1.7.0"}', KUBERAY_OPERATOR.namespace),
        ('{"source": "install"}', KUBERAY_OPERATOR.namespace),
    ],
)
def test_the_network_policy_admits_kuberays_operator_from_where_it_runs(
    kuberay: str | None, expected: str
) -> None:
    overrides = {"cluster.existing.addons.kuberay": kuberay} if kuberay else {}
    settings = settings_for(CONFIGURATION, **overrides)
    (policy,) = [
        p
        for p in render_deployed(settings).network_policies
        if p["metadata"]["name"] == "allow-kuberay-operator"
    ]
    ((peer,),) = [rule["from"] for rule in policy["spec"]["ingress"]]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": expected}


def test_the_examples_values_are_placeholders_to_replace() -> None:
    def paths(**overrides: str) -> set[str]:
        found = warnings(evaluate(settings_for(CONFIGURATION, **overrides)))
        return {f.path for f in found if f.code == "documentation-placeholder"}

    assert "cluster.existing" in paths()
    real = {**REAL, "cluster.existing.cluster_security_group_id": "sg-0a1b2c3d4e5f60718"}
    assert "cluster.existing" not in paths(**real)


@pytest.mark.parametrize(("configuration", "warned"), [("default", True), (CONFIGURATION, False)])
def test_no_admins_is_a_warning_only_on_a_cluster_the_app_creates(
    configuration: str, warned: bool
) -> None:
    settings = settings_for(configuration, **{"cluster.admin_principal_arns": "[]"})
    codes = {finding.code for finding in warnings(evaluate(settings))}
    assert ("no-cluster-admin" in codes) is warned


def _gpu(instance_type: str) -> dict[str, str]:
    return {f"gpu_nodes.{side}.instance_type": instance_type for side in ("prefill", "decode")}


# (add-on, overrides, the newest release without what the app relies on, the oldest with it):
# the boundaries read from each add-on's source (catalog/helm_charts.py, each floor's source).
BOUNDARIES = [
    ("kuberay", {}, "1.6.2", "1.7.0"),  # autoscalerOptions.args: ray-project/kuberay#4835
    ("load_balancer_controller", {}, "2.3.1", "2.4.0"),  # Kubernetes 1.21 at most until 2.4.0
    ("efa_device_plugin", _gpu("g6e.8xlarge"), "0.5.4", "0.5.5"),  # charts listing g6e
    ("efa_device_plugin", _gpu("p6-b200.48xlarge"), "0.5.5", "0.5.6"),  # charts listing p6-b200
]


@pytest.mark.parametrize(
    ("name", "overrides", "refused", "accepted"),
    BOUNDARIES,
    ids=[f"{row[0]}-{row[3]}" for row in BOUNDARIES],
)
def test_each_floor_is_the_oldest_release_with_what_the_app_relies_on(
    name: str, overrides: dict[str, str], refused: str, accepted: str
) -> None:
    settings_for(CONFIGURATION, **overrides, **_addon(name, source="installed", version=accepted))
    with pytest.raises(ConfigError) as raised:
        settings_for(
            CONFIGURATION, **overrides, **_addon(name, source="installed", version=refused)
        )
    (problem,) = raised.value.problems
    assert (problem.code, problem.path) == (
        "existing-cluster-addons",
        f"cluster.existing.addons.{name}.version",
    )
    assert f"older than {accepted}" in problem.message


@pytest.mark.parametrize(
    ("version", "warned"),
    [("0.18.2", False), (NVIDIA_MOFED_BY_DEFAULT[0], True), ("0.19.2", True),
     (NVIDIA_MOFED_BY_DEFAULT[1], False), ("0.20.0", False)],
)  # fmt: skip
def test_an_nvidia_plugin_that_claims_mofed_by_default_is_a_warning(
    version: str, warned: bool
) -> None:
    """0.19.0 to 0.19.2 give GPU containers the EFA devices unless run with mofedEnabled=false
    (NVIDIA/k8s-device-plugin#1550, reverted by #1837); no other release is too old."""
    settings = settings_for(
        CONFIGURATION, **_addon("nvidia_device_plugin", source="installed", version=version)
    )
    codes = {finding.code for finding in warnings(evaluate(settings))}
    assert ("existing-cluster-nvidia-mofed" in codes) is warned
