"""The serving stack: operators pinned, manifests applied, IRSA scoped, outputs."""

from __future__ import annotations

import json
from collections.abc import Callable

import aws_cdk as cdk
import pytest

import app
from catalog.helm_charts import KUBERAY_OPERATOR, SECRETS_STORE_CSI_AWS
from serving_manifests.names import SERVICE_ACCOUNT, endpoint_service_name
from tests.configurations import context_for
from tests.conftest import Synthesized


def _charts(synthesized: Synthesized) -> dict[str, dict]:
    return {
        chart["Properties"]["Chart"]: chart["Properties"]
        for chart in synthesized.resources("serving", "Custom::AWSCDK-EKS-HelmChart").values()
    }


def _manifests(synthesized: Synthesized) -> list[dict]:
    """Every Kubernetes object the stack applies (CloudFormation tokens left as they are)."""
    objects = []
    for resource in synthesized.resources(
        "serving", "Custom::AWSCDK-EKS-KubernetesResource"
    ).values():
        manifest = resource["Properties"]["Manifest"]
        if isinstance(manifest, str):  # objects with tokens render as Fn::Join instead
            objects.extend(json.loads(manifest))
    return objects


def test_kuberay_operator_is_pinned_and_on_system_nodes(default_app: Synthesized) -> None:
    chart = _charts(default_app)[KUBERAY_OPERATOR.chart]
    assert (chart["Repository"], chart["Version"], chart["Namespace"]) == (
        KUBERAY_OPERATOR.repository,
        KUBERAY_OPERATOR.version,
        KUBERAY_OPERATOR.namespace,
    )
    assert json.loads(chart["Values"])["nodeSelector"] == {"llm-serving/role": "system"}


def test_load_balancer_controller_runs_with_its_own_irsa_role(default_app: Synthesized) -> None:
    chart = _charts(default_app)["aws-load-balancer-controller"]
    values = json.dumps(chart["Values"])
    assert "vpcId" in values
    assert "region" in values
    roles = default_app.resources("serving", "AWS::IAM::Role")
    assert any("LoadBalancerController" in logical_id for logical_id in roles)


@pytest.mark.parametrize(
    ("configuration", "expected"), [("default", False), ("public-endpoint", True)]
)
def test_secrets_store_driver_only_for_gated_models(
    synthesize: Callable[[str], Synthesized], configuration: str, expected: bool
) -> None:
    assert (SECRETS_STORE_CSI_AWS.chart in _charts(synthesize(configuration))) is expected


def test_every_rendered_object_is_applied(default_app: Synthesized) -> None:
    applied = {(o["kind"], o["metadata"]["name"]) for o in _manifests(default_app)}
    settings = default_app.built.settings
    assert ("RayService", settings.serving.name) in applied
    assert ("Service", endpoint_service_name(settings)) in applied
    assert ("Namespace", settings.serving.namespace) in applied
    assert ("NetworkPolicy", "default-deny") in applied


def _model_role(synthesized: Synthesized) -> dict | None:
    roles = synthesized.resources("serving", "AWS::IAM::Role")
    matches = [r for lid, r in roles.items() if lid.startswith("PdRayServiceModelAccess")]
    return matches[0] if matches else None


def test_no_model_role_when_the_model_is_public(default_app: Synthesized) -> None:
    assert _model_role(default_app) is None


@pytest.mark.parametrize("configuration", ["public-endpoint", "reserved-capacity"])
def test_model_role_is_trusted_by_the_ray_service_account_only(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    synthesized = synthesize(configuration)
    role = _model_role(synthesized)
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    claims_id = statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]
    claims = json.dumps(synthesized.templates["serving"]["Resources"][claims_id]["Properties"])
    namespace = synthesized.built.settings.serving.namespace
    assert f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}" in claims


def _model_policy_statements(synthesized: Synthesized) -> list[dict]:
    policies = synthesized.resources("serving", "AWS::IAM::Policy")
    (policy,) = [p for lid, p in policies.items() if lid.startswith("PdRayServiceModelAccess")]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_s3_model_is_readable_under_its_prefix_only(reserved_app: Synthesized) -> None:
    model = reserved_app.built.settings.serving.model
    statements = _model_policy_statements(reserved_app)
    actions = sorted(
        a
        for s in statements
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    )
    assert actions == ["s3:GetObject", "s3:ListBucket"]
    resources = {s["Action"]: s["Resource"] for s in statements}
    assert resources["s3:GetObject"] == f"arn:aws:s3:::{model.s3_bucket}/{model.s3_prefix}/*"
    listing = next(s for s in statements if s["Action"] == "s3:ListBucket")
    assert listing["Condition"]["StringLike"]["s3:prefix"] == [
        model.s3_prefix,
        f"{model.s3_prefix}/*",
    ]


def test_hf_token_secret_is_readable_and_its_value_never_in_the_template(
    public_app: Synthesized,
) -> None:
    secret_arn = public_app.built.settings.serving.model.hf_token_secret_arn
    (statement,) = _model_policy_statements(public_app)
    assert statement["Resource"] == secret_arn
    assert set(statement["Action"]) == {
        "secretsmanager:GetSecretValue",
        "secretsmanager:DescribeSecret",
    }
    template = json.dumps(public_app.templates)
    assert "SecretString" not in template
    assert "resolve:secretsmanager" not in template


def test_outputs_give_the_endpoint_a_curl_example_and_the_dashboard(
    public_app: Synthesized,
) -> None:
    outputs = public_app.templates["serving"]["Outputs"]
    settings = public_app.built.settings
    example = json.dumps(outputs["ChatCompletionsExample"]["Value"])
    assert "/v1/chat/completions" in example
    assert settings.serving.model.id in example
    assert "EndpointHostname" in json.dumps(outputs["EndpointUrl"]["Value"])
    assert (
        f"service/{settings.serving.name}-head-svc 8265:8265"
        in outputs["RayDashboardCommand"]["Value"]
    )


def test_ucx_backend_synthesizes_with_a_warning(tmp_path) -> None:
    built = app.build(
        context_for("default", **{"serving.kv_transfer.backend": "UCX"}), outdir=str(tmp_path)
    )
    annotations = cdk.assertions.Annotations.from_stack(built.stacks.serving)
    annotations.has_warning("*", cdk.assertions.Match.string_like_regexp("UCX silently falls back"))
