"""The serving stack: operators pinned, manifests applied, IRSA scoped, outputs."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from app_config.endpoint_health import PROXY_HEALTH_PATH
from catalog.helm_charts import KUBERAY_OPERATOR, SECRETS_STORE_CSI_AWS
from constructs.serving.gcs_store import PORT as GCS_STORE_PORT
from constructs.serving.serving_operators import ON_SYSTEM_NODES
from serving_manifests.names import (
    HEAD_SERVICE_ACCOUNT,
    SERVE_PORT,
    WORKER_SERVICE_ACCOUNT,
)
from tests.configurations import CONFIGURATIONS, settings_for
from tests.conftest import Synthesized, cfn_text


def _charts(synthesized: Synthesized) -> dict[str, dict]:
    return {
        chart["Properties"]["Chart"]: chart["Properties"]
        for chart in synthesized.resources("serving", "Custom::AWSCDK-EKS-HelmChart").values()
    }


def _applied(synthesized: Synthesized) -> list[dict]:
    """Every Kubernetes object the Ray service applies, tokens shown as <token>."""
    resources = synthesized.resources("serving", "Custom::AWSCDK-EKS-KubernetesResource")
    return [
        document
        for logical_id, resource in resources.items()
        if logical_id.startswith("PdRayService")
        for document in json.loads(cfn_text(resource["Properties"]["Manifest"]))
    ]


def test_kuberay_operator_is_pinned_and_on_system_nodes(default_app: Synthesized) -> None:
    chart = _charts(default_app)[KUBERAY_OPERATOR.chart]
    assert (chart["Repository"], chart["Version"], chart["Namespace"]) == (
        KUBERAY_OPERATOR.repository,
        KUBERAY_OPERATOR.version,
        KUBERAY_OPERATOR.namespace,
    )
    assert json.loads(chart["Values"])["nodeSelector"] == ON_SYSTEM_NODES["nodeSelector"]


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


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_every_rendered_object_is_applied(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    synthesized = synthesize(configuration)
    rendered = synthesized.manifests.all()
    applied = _applied(synthesized)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in applied) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in rendered
    )


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
    namespace = synthesized.settings.serving.namespace
    assert f"system:serviceaccount:{namespace}:{WORKER_SERVICE_ACCOUNT}" in claims


def _model_policy_statements(synthesized: Synthesized) -> list[dict]:
    policies = synthesized.resources("serving", "AWS::IAM::Policy")
    (policy,) = [p for lid, p in policies.items() if lid.startswith("PdRayServiceModelAccess")]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def test_s3_model_is_readable_under_its_prefix_only(reserved_app: Synthesized) -> None:
    model = reserved_app.settings.serving.model
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
    secret_arn = public_app.settings.serving.model.hf_token_secret_arn
    (statement,) = _model_policy_statements(public_app)
    assert statement["Resource"] == secret_arn
    assert set(statement["Action"]) == {
        "secretsmanager:GetSecretValue",
        "secretsmanager:DescribeSecret",
    }
    template = json.dumps(public_app.templates)
    assert f"resolve:secretsmanager:{secret_arn}" not in template
    # The one dynamic reference is the GCS store's AUTH token, handed to ElastiCache only.
    (group,) = public_app.resources("serving", "AWS::ElastiCache::ReplicationGroup").values()
    assert template.count("resolve:secretsmanager") == 1
    assert "resolve:secretsmanager" in json.dumps(group["Properties"]["AuthToken"])


def test_outputs_give_the_endpoint_a_curl_example_and_the_dashboard(
    public_app: Synthesized,
) -> None:
    outputs = public_app.templates["serving"]["Outputs"]
    settings = public_app.settings
    example = json.dumps(outputs["ChatCompletionsExample"]["Value"])
    assert "/v1/chat/completions" in example
    assert settings.serving.model.id in example
    assert "DNSName" in json.dumps(outputs["EndpointUrl"]["Value"])
    assert (
        f"service/{settings.serving.name}-head-svc 8265:8265"
        in outputs["RayDashboardCommand"]["Value"]
    )


def test_ucx_backend_synthesizes_with_a_warning(synthesize) -> None:
    ucx = synthesize("default", {"serving.kv_transfer.backend": "UCX"})
    assert [w for w in ucx.warnings("serving") if "UCX silently falls back" in w]
    assert not [w for w in synthesize("default").warnings() if "UCX silently" in w]


def test_a_side_without_room_for_a_new_ray_cluster_synthesizes_with_a_warning(
    reserved_app,
) -> None:
    """Prefill's Capacity Block sized to what serves (min = desired = max = 2) leaves a
    NewCluster upgrade no nodes; decode's defaults (1 serving, room for 1 more) do."""
    settings = reserved_app.settings
    assert settings.sides_without_upgrade_room() == ["prefill"]
    assert [w for w in reserved_app.warnings("serving") if "cannot hold a NewCluster upgrade" in w]
    assert settings_for("default").sides_without_upgrade_room() == []
    in_place = settings_for("reserved-capacity", **{"serving.upgrade_strategy": "None"})
    assert in_place.sides_without_upgrade_room() == []


def _load_balancer(synthesized: Synthesized) -> dict:
    (balancer,) = synthesized.resources(
        "serving", "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ).values()
    return balancer["Properties"]


def test_endpoint_is_internal_plain_tcp_by_default(default_app: Synthesized) -> None:
    assert _load_balancer(default_app)["Scheme"] == "internal"
    (listener,) = default_app.resources("serving", "AWS::ElasticLoadBalancingV2::Listener").values()
    endpoint = default_app.settings.serving.endpoint
    assert (listener["Properties"]["Protocol"], listener["Properties"]["Port"]) == (
        "TCP",
        endpoint.port,
    )


def test_internet_facing_endpoint_terminates_tls_with_the_certificate(
    public_app: Synthesized,
) -> None:
    endpoint = public_app.settings.serving.endpoint
    assert _load_balancer(public_app)["Scheme"] == "internet-facing"
    (listener,) = public_app.resources("serving", "AWS::ElasticLoadBalancingV2::Listener").values()
    props = listener["Properties"]
    assert (props["Protocol"], props["Port"]) == ("TLS", endpoint.port)
    assert props["Certificates"] == [{"CertificateArn": endpoint.certificate_arn}]


@pytest.mark.parametrize("configuration", ["default", "public-endpoint"])
def test_only_the_named_clients_reach_the_load_balancer(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    """With authentication none, the listener admits the named CIDRs and security groups only;
    behind the signed API (the default), no client at all: only the VPC link's PrivateLink
    traffic, which the load balancer then exempts from the group's rules."""
    synthesized = synthesize(configuration)
    endpoint = synthesized.settings.serving.endpoint
    groups = synthesized.resources("serving", "AWS::EC2::SecurityGroup")
    (group,) = [g for lid, g in groups.items() if lid.startswith("EndpointSecurityGroup")]
    ingress = group["Properties"].get("SecurityGroupIngress", [])
    attributes = {
        a["Key"]: a["Value"] for a in _load_balancer(synthesized).get("LoadBalancerAttributes", [])
    }
    enforcement = _load_balancer(synthesized).get(
        "EnforceSecurityGroupInboundRulesOnPrivateLinkTraffic", "on"
    )
    if endpoint.authentication == "iam":
        assert ingress == []
        assert enforcement == "off"
    else:
        assert sorted(rule["CidrIp"] for rule in ingress if "CidrIp" in rule) == sorted(
            str(cidr) for cidr in endpoint.source_cidrs
        )
        assert {rule["FromPort"] for rule in ingress} == {endpoint.port}
        assert enforcement == "on"
    assert attributes.get("load_balancing.cross_zone.enabled") == "true"


def test_target_group_checks_serve_proxy_health_on_pod_ips(default_app: Synthesized) -> None:
    (group,) = default_app.resources("serving", "AWS::ElasticLoadBalancingV2::TargetGroup").values()
    props = group["Properties"]
    assert (props["TargetType"], props["Port"]) == ("ip", SERVE_PORT)
    assert (props["HealthCheckProtocol"], props["HealthCheckPath"]) == ("HTTP", PROXY_HEALTH_PATH)
    binding = next(o for o in _applied(default_app) if o["kind"] == "TargetGroupBinding")
    assert binding["spec"]["targetGroupARN"] == "<token>"  # the target group above, by reference


# Ray GCS fault tolerance (on in the public-endpoint configuration).


def test_gcs_store_exists_only_with_fault_tolerance(
    default_app: Synthesized, public_app: Synthesized
) -> None:
    assert not default_app.settings.serving.gcs_fault_tolerance.enabled
    assert default_app.resources("serving", "AWS::ElastiCache::ReplicationGroup") == {}
    assert len(public_app.resources("serving", "AWS::ElastiCache::ReplicationGroup")) == 1


def test_gcs_store_is_encrypted_authenticated_multi_az_and_private(public_app: Synthesized) -> None:
    settings = public_app.settings.serving.gcs_fault_tolerance
    (group,) = public_app.resources("serving", "AWS::ElastiCache::ReplicationGroup").values()
    props = group["Properties"]
    assert props["Engine"] == "valkey"
    assert props["EngineVersion"] == settings.engine_version
    assert props["TransitEncryptionEnabled"] is True
    assert props["TransitEncryptionMode"] == "required"  # no plain-text clients at all
    assert props["AtRestEncryptionEnabled"] is True
    assert "KmsKeyId" in props
    assert "{{resolve:secretsmanager:" in cfn_text(props["AuthToken"])
    assert props["MultiAZEnabled"] is True
    assert props["AutomaticFailoverEnabled"] is True
    assert props["NumCacheClusters"] == 1 + settings.replicas
    (subnet_group_id,) = public_app.resources("serving", "AWS::ElastiCache::SubnetGroup")
    assert props["CacheSubnetGroupName"] == {"Ref": subnet_group_id}
    (subnet_group,) = public_app.resources("serving", "AWS::ElastiCache::SubnetGroup").values()
    subnets = subnet_group["Properties"]["SubnetIds"]
    assert len(subnets) == len(public_app.settings.network.availability_zones)
    for subnet in subnets:  # imported from the network stack's private subnets
        assert "PrivateSubnet" in subnet["Fn::ImportValue"]


def test_gcs_store_accepts_only_tls_port_from_the_cluster(public_app: Synthesized) -> None:
    (group,) = public_app.resources("serving", "AWS::ElastiCache::ReplicationGroup").values()
    (sg_ref,) = group["Properties"]["SecurityGroupIds"]
    security_group = public_app.templates["serving"]["Resources"][sg_ref["Fn::GetAtt"][0]]
    (ingress,) = security_group["Properties"]["SecurityGroupIngress"]
    assert (ingress["FromPort"], ingress["ToPort"]) == (GCS_STORE_PORT, GCS_STORE_PORT)
    assert "ClusterSecurityGroupId" in json.dumps(ingress["SourceSecurityGroupId"])
    (egress,) = security_group["Properties"]["SecurityGroupEgress"]
    assert egress["CidrIp"] == "255.255.255.255/32"  # CDK's "no egress" rule


def test_only_the_ray_head_may_read_the_gcs_token(public_app: Synthesized) -> None:
    settings = public_app.settings
    (secret_id,) = [
        lid
        for lid in public_app.resources("serving", "AWS::SecretsManager::Secret")
        if lid.startswith("GcsStoreAuthToken")
    ]
    roles = public_app.resources("serving", "AWS::IAM::Role")
    (head_role_id,) = [lid for lid in roles if lid.startswith("PdRayServiceHeadRole")]
    _, claims = public_app.irsa_trust("serving", head_role_id)
    assert f"system:serviceaccount:{settings.serving.namespace}:{HEAD_SERVICE_ACCOUNT}" in claims
    readers = [
        policy["Properties"]["Roles"]
        for policy in public_app.resources("serving", "AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in s["Action"] and s["Resource"] == {"Ref": secret_id}
    ]
    assert readers == [[{"Ref": head_role_id}]]
    (rayservice,) = [d for d in _applied(public_app) if d["kind"] == "RayService"]
    options = rayservice["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
    assert options["redisAddress"] == f"rediss://<token>:{GCS_STORE_PORT}"
    charts = _charts(public_app)
    driver = json.loads(charts[SECRETS_STORE_CSI_AWS.chart]["Values"])["secrets-store-csi-driver"]
    assert driver["syncSecret"] == {"enabled": True}


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_no_kubernetes_resource_is_empty(
    synthesize: Callable[[str], Synthesized], configuration: str
) -> None:
    """kubectl create fails on a manifest with no objects: such a resource would fail to deploy."""
    synthesized = synthesize(configuration)
    for role in ("cluster", "serving", "observability"):
        resources = synthesized.resources(role, "Custom::AWSCDK-EKS-KubernetesResource")
        for logical_id, resource in resources.items():
            assert json.loads(cfn_text(resource["Properties"]["Manifest"])), logical_id


def test_namespace_outlives_neither_kuberay_nor_the_gcs_store(public_app: Synthesized) -> None:
    """CloudFormation deletes in reverse dependency order: the namespace goes after the
    operator (whose Role lives in it; the RayService, held by KubeRay's GCS cleanup finalizer,
    goes before the operator: tests/stacks/test_kuberay_scope.py) and before the store."""
    resources = public_app.templates["serving"]["Resources"]
    (namespace_id,) = [lid for lid in resources if lid.startswith("PdRayServiceNamespace")]
    assert any(d.startswith("GcsStore") for d in resources[namespace_id]["DependsOn"])
    (operator,) = [r for lid, r in resources.items() if lid.startswith("OperatorsKubeRayOperator")]
    assert namespace_id in operator["DependsOn"]


def test_a_tls_endpoint_logs_its_connections_and_a_tcp_one_says_why_not(
    default_app: Synthesized, public_app: Synthesized
) -> None:
    """NLB access logs exist for TLS listeners only: the TLS endpoint writes them to its own
    bucket; the TCP endpoint's acknowledgment says exactly that, and no more."""
    (tls,) = public_app.resources("serving", "AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    attributes = {a["Key"]: a["Value"] for a in tls["Properties"]["LoadBalancerAttributes"]}
    assert attributes["access_logs.s3.enabled"] == "true"
    (bucket,) = public_app.resources("serving", "AWS::S3::Bucket").values()
    assert bucket["Properties"]["PublicAccessBlockConfiguration"]["BlockPublicPolicy"] is True
    (tcp,) = default_app.resources("serving", "AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    skips = {s["id"]: s["comment"] for s in tcp["Metadata"]["checkov"]["skip"]}
    assert "TLS listeners only" in skips["CKV_AWS_91"]
    assert default_app.resources("serving", "AWS::S3::Bucket") == {}


def test_the_load_balancer_controller_may_only_bind_the_endpoints_target_group(
    default_app: Synthesized,
) -> None:
    """It binds one target group: no load balancer, listener, WAF, Shield or EC2 write on the
    account; writes only on that target group. The load balancer's rule on the cluster
    security group is a CloudFormation resource instead."""
    resources = default_app.templates["serving"]["Resources"]
    (policy,) = [
        r["Properties"]["PolicyDocument"]
        for lid, r in resources.items()
        if r["Type"] == "AWS::IAM::Policy" and "LoadBalancerController" in lid
    ]
    (target_group_id,) = [
        lid
        for lid, r in resources.items()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"
    ]
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert not any(a.split(":")[0] in ("wafv2", "waf-regional", "shield", "iam") for a in actions)
    assert not any(":Create" in a or ":Delete" in a or ":Modify" in a for a in actions)
    for statement in policy["Statement"]:
        writes = [a for a in statement["Action"] if ":Describe" not in a]
        if not writes:
            assert statement["Resource"] == "*"
            continue
        resource = json.dumps(statement["Resource"])
        assert all(a.startswith("elasticloadbalancing:") for a in writes), resource
        assert statement["Resource"] == {"Ref": target_group_id}
    (rule,) = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress"
        and "ClusterSecurityGroupId" in json.dumps(r["Properties"]["GroupId"])
    ]
    assert (rule["FromPort"], rule["ToPort"], rule["IpProtocol"]) == (SERVE_PORT, SERVE_PORT, "tcp")
    assert "Endpoint" in json.dumps(rule["SourceSecurityGroupId"])
    (chart,) = [
        r
        for r in resources.values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
        and "aws-load-balancer-controller" in json.dumps(r["Properties"].get("Chart", ""))
    ]
    values = json.loads(cfn_text(chart["Properties"]["Values"]))
    assert values["enableServiceMutatorWebhook"] is False
    assert values["controllerConfig"]["featureGates"]["EnableServiceController"] is False
