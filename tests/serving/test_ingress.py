"""The OpenAI ingress in front of both sides runs as Ray Serve LLM 2.58 configures it by default;
docs/operating.md ("The ingress does not scale") states what that means, and this pins why."""

from __future__ import annotations

import pytest
from ray.serve.config import AutoscalingConfig

from serving_manifests.serve_config import render_serve_config
from tests.configurations import CONFIGURATIONS, settings_for


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_the_ingress_runs_ray_serve_llms_single_replica_default(name: str) -> None:
    (application,) = render_serve_config(settings_for(name))["applications"]
    # No ingress_deployment_config: Ray 2.58's DEFAULT_INGRESS_OPTIONS apply (ingress.py), an
    # autoscaling_config without max_replicas, so Serve's own default bounds the ingress.
    assert "ingress_deployment_config" not in application["args"]
    assert AutoscalingConfig().max_replicas == 1
