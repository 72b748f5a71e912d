"""The OpenAI ingress in front of both sides follows decode's replicas by default, because one
ingress replica relays about one engine's saturation rate (`make e2e-bench --ingress`,
docs/verification.md); docs/operating.md ("How each side scales") states what that means."""

from __future__ import annotations

import pytest
from ray.serve.config import AutoscalingConfig

from serving_manifests.serve_config import render_serve_config
from tests.configurations import CONFIGURATIONS, settings_for


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_the_ingress_follows_decodes_replicas_by_default(name: str) -> None:
    settings = settings_for(name)
    autoscaling = AutoscalingConfig(**_ingress_options(settings)["autoscaling_config"])
    decode = settings.serving.decode
    assert autoscaling.min_replicas == 1
    assert autoscaling.max_replicas == max(decode.max_replicas, 1)
    assert autoscaling.target_ongoing_requests == decode.autoscaling.target_ongoing_requests


def test_unset_rays_default_would_be_one_ingress_replica_whatever_decode_runs() -> None:
    # Without ingress_deployment_config, Ray 2.58's DEFAULT_INGRESS_OPTIONS (ingress.py) give
    # an autoscaling_config without max_replicas, which Serve's own default bounds to 1: what
    # the rendered default replaces.
    assert AutoscalingConfig().max_replicas == 1


# serving.ingress set: rendered as the builder's ingress_deployment_config, read here by Ray
# 2.58's own schema and merge (PDServingArgs, maybe_apply_llm_deployment_config_defaults) so that
# what Serve builds is what the section says.
INGRESS_CASES = [
    # (context overrides, the ingress autoscaling bounds and target Serve gets)
    (
        {"serving.ingress.min_replicas": "2", "serving.ingress.max_replicas": "6"},
        {"min_replicas": 2, "max_replicas": 6},
    ),
    # max_replicas unset: decode's max_replicas (one source of truth)
    (
        {"serving.ingress.min_replicas": "1", "serving.decode.max_replicas": "2"},
        {"min_replicas": 1},
    ),
    ({"serving.ingress.target_ongoing_requests": "64"}, {"target_ongoing_requests": 64}),
    # target unset: decode's target (one ingress replica per decode replica's worth of streams)
    (
        {"serving.decode.autoscaling.target_ongoing_requests": "16"},
        {"target_ongoing_requests": 16},
    ),
    # the section untouched: its defaults, rendered (no longer Ray's single replica)
    ({}, {"min_replicas": 1}),
]


def _ingress_options(settings) -> dict:
    """What the builder receives. Ray 2.58 deep-merges it over DEFAULT_INGRESS_OPTIONS
    (prefill_decode/builder.py, common/dict_utils.py deep_merge_dicts): keys set here win, the
    default max_ongoing_requests stays. (ray.llm itself needs pyarrow, which only the e2e venv
    has; Serve's AutoscalingConfig below is the schema the merged options must pass.)"""
    (application,) = render_serve_config(settings)["applications"]
    return application["args"]["ingress_deployment_config"]


@pytest.mark.parametrize(("overrides", "expected"), INGRESS_CASES)
def test_the_ingress_section_becomes_the_ingress_deployments_autoscaling(overrides, expected):
    settings = settings_for("default", **overrides)
    section = settings.serving.ingress
    options = _ingress_options(settings)
    autoscaling = AutoscalingConfig(**options["autoscaling_config"])
    want = {
        "min_replicas": section.min_replicas,
        "max_replicas": section.max_replicas
        or max(settings.serving.decode.max_replicas, section.min_replicas),
        "target_ongoing_requests": section.target_ongoing_requests
        or settings.serving.decode.autoscaling.target_ongoing_requests,
        **expected,
    }
    got = {key: getattr(autoscaling, key) for key in want}
    assert got == want
    # Only the autoscaling options: the builder's default max_ongoing_requests stays.
    assert set(options) == {"autoscaling_config"}


def test_the_ingress_follows_decodes_upper_bound_when_it_names_none() -> None:
    settings = settings_for(
        "default", **{"serving.ingress.min_replicas": "1", "serving.decode.max_replicas": "2"}
    )
    bounds = _ingress_options(settings)["autoscaling_config"]
    assert bounds["max_replicas"] == settings.serving.decode.max_replicas


@pytest.mark.parametrize(
    ("overrides", "setting", "fragment"),
    [
        (
            {"serving.ingress.min_replicas": "4", "serving.ingress.max_replicas": "2"},
            "serving.ingress",
            "max_replicas 2 is below min_replicas 4",
        ),
        ({"serving.ingress.min_replicas": "0"}, "serving.ingress.min_replicas", "greater than"),
        (
            {"serving.ingress.target_ongoing_requests": "0"},
            "serving.ingress.target_ongoing_requests",
            "greater than 0",
        ),
    ],
)
def test_bad_ingress_bounds_are_refused_naming_the_setting(overrides, setting, fragment) -> None:
    from app_config import ConfigError

    with pytest.raises(ConfigError) as raised:
        settings_for("default", **overrides)
    assert setting in str(raised.value)
    assert fragment in str(raised.value)
