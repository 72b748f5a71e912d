"""Names and values the app derives from settings, against the rules of the services that take
them (app_config/derived_names.py, app_config/rules/derived_names.py, network.py, timeouts.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from app_config import ConfigError
from app_config.derived_names import derived_names
from app_config.drain import termination_grace_seconds
from app_config.model import Settings
from app_config.rules import evaluate
from app_config.rules.network import SUBNET_RESERVED_ADDRESSES, gpu_subnet_addresses
from app_config.rules.timeouts import EKS_NODE_DRAIN_SECONDS, longest_drain_within_node_update
from app_config.serving import RAYSERVICE_NAME_MAX
from catalog.vpc_cni_limits import VPC_CNI_LIMITS, addresses_held
from tests.configurations import settings_for
from tests.conftest import Synthesized


def _past_validation(settings: Settings, **values: str) -> Settings:
    """The settings with values their own fields would refuse: what the rule would meet if a
    field's limit were looser than a derived name needs."""
    sections: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for dotted, value in values.items():
        section, _, field = dotted.rpartition(".")
        if section:
            sections.setdefault(section, {})[field] = value
        else:
            top[field] = value
    for section, update in sections.items():
        top[section] = getattr(settings, section).model_copy(update=update)
    return settings.model_copy(update=top)


# Each row: a value past its field's own limit, the setting the finding names, a fragment of the
# message (the service's rule, or the room left).
INVALID_NAMES = [
    ({"prefix": "p" * 115}, "prefix", "at most 114 characters here"),
    ({"prefix": "9-lives"}, "prefix", "starting with a letter"),
    ({"prefix": "PD"}, "prefix", "lower-case letters and digits"),
    ({"cluster.name": "c" * 101}, "cluster.name", "an EKS cluster name takes at most 100"),
    ({"cluster.name": "my.cluster"}, "cluster.name", "letters, digits, '-' and '_'"),
    ({"serving.name": "s" * 48}, "serving.name", "at most 47"),
    ({"serving.name": "s" * 48}, "serving.name", "serving.name may have at most 47"),
    ({"serving.name": "pd_llm"}, "serving.name", "DNS-1035"),
    ({"serving.namespace": "n" * 250}, "serving.namespace", "serving.namespace + serving.name"),
]


@pytest.mark.parametrize(("values", "path", "fragment"), INVALID_NAMES)
def test_a_derived_name_its_service_refuses_names_the_setting_and_its_room(
    values: dict[str, str], path: str, fragment: str
) -> None:
    settings = _past_validation(settings_for("default"), **values)
    found = [f for f in evaluate(settings) if f.code == "derived-name" and f.path == path]
    assert any(fragment in str(finding) for finding in found), [str(f) for f in found]


def test_the_longest_settings_accepted_derive_only_names_their_services_accept() -> None:
    """Every setting a name carries at the most its field takes: no derived name goes past its
    service's rule, so the field limits are enough (a new suffix that is not fails here)."""
    settings = settings_for(
        "default",
        prefix="p" + "x" * 18 + "p",
        **{
            "cluster.name": "C_" + "c" * 98,
            "serving.name": "s" * RAYSERVICE_NAME_MAX,
            "serving.namespace": "n" * 63,
            "observability.container_logs": "true",
        },
    )
    assert [f for f in evaluate(settings) if f.code == "derived-name"] == []
    assert min(d.rule.max_length - len(d.name) for d in derived_names(settings)) >= 0


def test_the_templates_carry_the_names_the_rule_checks(
    synthesize: Callable[[str], Synthesized],
) -> None:
    """One source of truth: each derived name of an object this configuration creates is in the
    synthesized templates (Kubernetes objects inside their manifests) as the rule computed it."""
    built = synthesize("default")
    text = json.dumps(built.templates)
    # Objects the default configuration does not create, and the Service KubeRay makes itself.
    absent_here = {"the model cache's PersistentVolume", "the image cache's repository prefix"}
    absent_here.add("KubeRay's Serve Service")
    absent_here |= {d.what for d in derived_names(built.settings) if "Budget" in d.what}
    missing = [
        (d.what, d.name)
        for d in derived_names(built.settings)
        if d.what not in absent_here and "stack" not in d.what and d.name not in text
    ]
    assert missing == []


def test_a_grace_period_past_ekss_node_update_window_is_refused_and_the_longest_is_accepted():
    longest = longest_drain_within_node_update()
    assert termination_grace_seconds(longest) == EKS_NODE_DRAIN_SECONDS
    settings_for("default", **{"serving.drain_timeout_seconds": str(longest)})
    with pytest.raises(ConfigError, match=f"at most {longest}"):
        settings_for("default", **{"serving.drain_timeout_seconds": str(longest + 1)})


def test_the_gpu_subnet_is_counted_by_the_cni_limits_of_each_side_at_max_size() -> None:
    """A p5 node holds two interfaces of 50 addresses (its card 0 has two); a subnet just big
    enough passes, one address fewer warns."""
    settings = settings_for("default", **{"gpu_nodes.decode.scaling.max_size": "40"})
    needed = gpu_subnet_addresses(settings)
    limits = VPC_CNI_LIMITS[settings.gpu_nodes.decode.instance_type]
    assert needed["gpu_nodes.decode"] == 40 * limits.interfaces * limits.addresses_per_interface
    total = sum(needed.values())
    mask = next(m for m in range(28, 15, -1) if 2 ** (32 - m) - SUBNET_RESERVED_ADDRESSES >= total)
    fits = settings_for("default", **{"gpu_nodes.decode.scaling.max_size": "40"})
    fits = _past_validation(fits, **{"network.private_subnet_mask": mask})
    assert "subnet-addresses" not in [f.code for f in evaluate(fits)]
    tight = _past_validation(fits, **{"network.private_subnet_mask": mask + 1})
    assert "subnet-addresses" in [f.code for f in evaluate(tight)]


@pytest.mark.parametrize(("pods", "interfaces"), [(0, 2), (49, 2), (50, 3), (1000, 15)])
def test_the_cni_holds_a_warm_interface_beside_those_in_use(pods: int, interfaces: int) -> None:
    """p4d: 15 interfaces of 50 addresses on card 0 (amazon-vpc-cni-k8s limits)."""
    assert addresses_held("p4d.24xlarge", pods) == interfaces * 50


def test_every_gpu_instance_of_the_catalog_has_its_cni_limits() -> None:
    from catalog.instances import CATALOG

    assert set(CATALOG) <= set(VPC_CNI_LIMITS)
