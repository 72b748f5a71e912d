"""Each side's scaling chain, walked with the objects the app synthesizes:

request load -> Serve replicas (each side's autoscaling_config, checked by Ray's DeploymentConfig)
-> Ray worker pods (the RayService's autoscaler and its per-group bounds, KubeRay CRD fields)
-> GPU nodes (the Cluster Autoscaler's values and IAM, and the node template it builds for an
empty node group: tests/node_fit_model.py).
"""

from __future__ import annotations

import json

import pytest
from ray.serve._private.config import DeploymentConfig

from app_config.autoscaler_discovery import CLUSTER_NAME_TAG, DEPLOYMENT_TAG
from app_config.node_labels import GPU_ROLES
from catalog.instances import CATALOG
from constructs.cluster.cluster_autoscaler import DEPLOYMENT_NAME, READS, WRITES
from pdctl import efa_jobs
from tests.conftest import Synthesized, cfn_text
from tests.node_fit_model import EFFECTS, TemplateNode, template_node, unfit_reasons

EKS_EFFECT = {kubernetes: eks for eks, kubernetes in EFFECTS.items()}

# EC2 user guide, general purpose instance specifications: vCPUs and GiB of the system type
# every test configuration uses.
SYSTEM_INSTANCE_FACTS = {"m7i.xlarge": (4, 16)}


@pytest.fixture(scope="module", params=["default", "public-endpoint", "reserved-capacity"])
def app(request, synthesize) -> Synthesized:
    return synthesize(request.param)


def _ray_service(app: Synthesized) -> dict:
    return app.manifests.rayservice


def _worker_groups(app: Synthesized) -> dict[str, dict]:
    groups = _ray_service(app)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return {group["groupName"]: group for group in groups}


def _templates(app: Synthesized) -> dict[str, TemplateNode]:
    """The node the Cluster Autoscaler imagines for each node group, GPU and system."""
    settings = app.settings
    templates = {}
    nodegroups = app.resources("gpu-nodes", "AWS::EKS::Nodegroup")
    for role, group in settings.gpu_nodes.groups().items():
        (props,) = [
            ng["Properties"]
            for ng in nodegroups.values()
            if ng["Properties"]["Labels"].get("llm-serving/role") == role
        ]
        instance = group.instance
        templates[role] = template_node(
            role, props, instance.vcpus, instance.memory_gib, instance.gpus
        )
    (system,) = [
        ng["Properties"] for ng in app.resources("cluster", "AWS::EKS::Nodegroup").values()
    ]
    vcpus, memory = SYSTEM_INSTANCE_FACTS[settings.cluster.system_nodes.instance_type]
    templates["system"] = template_node("system", system, vcpus, memory, gpus=0)
    return templates


def _nodegroup_scaling(app: Synthesized, role: str) -> dict:
    for ng in app.resources("gpu-nodes", "AWS::EKS::Nodegroup").values():
        if ng["Properties"]["Labels"].get("llm-serving/role") == role:
            return ng["Properties"]["ScalingConfig"]
    raise AssertionError(role)


@pytest.mark.parametrize("role", GPU_ROLES)
def test_load_to_replicas_is_servess_own_valid_autoscaling(app, role) -> None:
    settings = app.settings
    serve = app.manifests.serve_config
    (application,) = serve["applications"]
    options = dict(application["args"][f"{role}_config"]["deployment_config"])
    options.pop("request_router_config")  # its import needs pyarrow (test_serving_schemas)
    autoscaling = DeploymentConfig(**options).autoscaling_config
    engine = settings.serving.engine(role)
    assert (autoscaling.min_replicas, autoscaling.max_replicas) == (
        engine.min_replicas,
        engine.max_replicas,
    )
    assert autoscaling.target_ongoing_requests == engine.autoscaling.target_ongoing_requests


@pytest.mark.parametrize("role", GPU_ROLES)
def test_replicas_to_worker_pods_never_outgrow_the_node_group(app, role) -> None:
    """Ray's autoscaler adds a worker pod per node's worth of pending replicas, between the
    group's bounds, which are the node group's: one worker pod holds a whole node."""
    settings = app.settings
    cluster = _ray_service(app)["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is True
    group, scaling = _worker_groups(app)[role], _nodegroup_scaling(app, role)
    assert group["minReplicas"] == scaling["MinSize"]
    assert group["maxReplicas"] == scaling["MaxSize"]
    tp, pp = settings.replica_gpus(role)
    per_node = int(group["resources"][role])  # the side's custom resource, one per GPU
    most_replicas = group["maxReplicas"] * (per_node // (tp * pp))
    assert settings.serving.engine(role).max_replicas <= most_replicas


def resources_rays_autoscaler_sees(group: dict) -> set[str]:
    """The Ray resources Ray 2.58's autoscaler believes a KubeRay worker group's pods offer
    (ray/autoscaler/_private/kuberay/autoscaling_config.py, _get_ray_resources_from_group_spec):
    CPU, GPU (container limits), memory, and the group's `resources` (rayStartParams' when it has
    none). Resources Ray detects only on a running node (accelerator_type:<GPU>) are not there."""
    limits = group["template"]["spec"]["containers"][0]["resources"].get("limits", {})
    seen = {"CPU", "memory"} | ({"GPU"} if "nvidia.com/gpu" in limits else set())
    return seen | set(group.get("resources") or {})


def bundle_resources(llm_config: dict) -> set[str]:
    """What each placement bundle of a side's replica asks for: bundle_per_worker, plus the
    accelerator_type share Ray Serve LLM adds when the config names one
    (ray/llm/_internal/serve/engines/vllm/vllm_models.py)."""
    wanted = set(llm_config["placement_group_config"]["bundle_per_worker"])
    if llm_config.get("accelerator_type"):
        wanted.add(f"accelerator_type:{llm_config['accelerator_type']}")
    return wanted


@pytest.mark.parametrize("role", GPU_ROLES)
def test_every_resource_a_replica_asks_for_is_one_rays_autoscaler_can_add(app, role) -> None:
    """Else Ray's autoscaler finds the pending replica infeasible and never adds a worker pod:
    a replica that fits a running node may still never get a new one."""
    serve = app.manifests.serve_config
    (application,) = serve["applications"]
    llm = application["args"][f"{role}_config"]
    group = _worker_groups(app)[role]
    assert bundle_resources(llm) <= resources_rays_autoscaler_sees(group)
    named = {**llm, "accelerator_type": "H100"}  # what an accelerator_type would add
    assert not bundle_resources(named) <= resources_rays_autoscaler_sees(group)


@pytest.mark.parametrize("role", GPU_ROLES)
def test_a_pending_worker_pod_fits_its_own_groups_template_and_no_other(app, role) -> None:
    templates = _templates(app)
    pod = _worker_groups(app)[role]["template"]["spec"]
    assert unfit_reasons(pod, templates[role]) == []
    for other, node in templates.items():
        if other != role:
            assert unfit_reasons(pod, node), f"a {role} worker would fit the {other} group"


def test_without_the_node_template_tags_a_worker_never_fits_an_empty_group(app) -> None:
    """Why the tags exist: CA knows EFA devices and huge pages of an empty group only from
    them (the model itself must be able to say no)."""
    templates = _templates(app)
    bare = TemplateNode(
        "bare",
        templates["prefill"].labels,
        templates["prefill"].taints,
        {k: v for k, v in templates["prefill"].allocatable.items() if "/" not in k or "gpu" in k},
    )
    reasons = unfit_reasons(_worker_groups(app)["prefill"]["template"]["spec"], bare)
    assert any("vpc.amazonaws.com/efa" in reason for reason in reasons)


@pytest.mark.parametrize("role", GPU_ROLES)
def test_the_efa_check_pods_fit_the_same_template(app, role) -> None:
    """`pdctl efa-check` on a busy group gets a node from the autoscaler like a worker would."""
    plan = efa_jobs.plan_for(app.settings, "x", account="123456789012")
    job = efa_jobs.job_manifest(plan, role)
    assert unfit_reasons(job["spec"]["template"]["spec"], _templates(app)[role]) == []


def test_the_cluster_autoscaler_discovers_this_cluster_and_runs_on_system_nodes(app) -> None:
    settings = app.settings
    (chart,) = [
        c
        for c in app.resources("cluster", "Custom::AWSCDK-EKS-HelmChart").values()
        if c["Properties"]["Chart"] == "cluster-autoscaler"
    ]
    values = json.loads(cfn_text(chart["Properties"]["Values"]).replace("<token>", "TOKEN"))
    assert values["autoDiscovery"]["clusterName"] == settings.cluster_name
    assert values["fullnameOverride"] == DEPLOYMENT_NAME  # the runbook's `logs deploy/...`
    assert values["nodeSelector"] == {"llm-serving/role": "system"}
    timing = settings.cluster.node_autoscaler
    args = values["extraArgs"]
    assert args["scale-down-unneeded-time"] == f"{timing.scale_down_unneeded_minutes}m"
    assert args["max-node-provision-time"] == f"{timing.max_node_provision_minutes}m"
    assert args["balance-similar-node-groups"] is False
    (cluster,) = app.resources("cluster", "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["Name"] == settings.cluster_name
    # The autoscaler release of the cluster's minor ("We recommend using Cluster Autoscaler with
    # the Kubernetes control plane version for which it was meant", its README), not the chart's
    # default image, whose minor is the chart's appVersion.
    image_minor = values["image"]["tag"].removeprefix("v").rsplit(".", 1)[0]
    assert image_minor == cluster["Properties"]["Version"] == settings.cluster.kubernetes_version


def test_the_cluster_autoscaler_may_resize_only_this_deployments_groups(app) -> None:
    settings = app.settings
    statements = [
        statement
        for logical_id, policy in app.resources("cluster", "AWS::IAM::Policy").items()
        # The autoscaler's role (the node groups' tag lookups read DescribeNodegroup too).
        if logical_id.startswith("ClusterAutoscaler")
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "autoscaling:SetDesiredCapacity" in json.dumps(statement)
        or "eks:DescribeNodegroup" in json.dumps(statement)
        or "autoscaling:DescribeAutoScalingGroups" in json.dumps(statement)
    ]
    by_action = {
        action: statement
        for statement in statements
        for action in (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
    }
    for action in WRITES:
        condition = by_action[action]["Condition"]["StringEquals"]
        assert condition == {
            f"aws:ResourceTag/{CLUSTER_NAME_TAG}": settings.cluster_name,
            f"aws:ResourceTag/{DEPLOYMENT_TAG}": settings.prefix,
        }
    describe = cfn_text(by_action["eks:DescribeNodegroup"]["Resource"])
    assert describe.endswith(f":nodegroup/{settings.cluster_name}/*/*")
    assert set(READS) <= set(by_action)
    assert "Condition" not in by_action[READS[0]]


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_every_catalog_instance_gets_a_template_its_worker_fits(instance_type) -> None:
    """The tags are computed per instance: a worker pod sized from the catalog fits them.

    The model is the 8B of the default's family, whose weights fit one GPU of every catalog
    instance: the default's 32B does not fit a single L4 or L40S, which the weights rule refuses.
    """
    from app_config.node_template import node_template_tags
    from tests.configurations import render_deployed, settings_for

    settings = settings_for(
        "default",
        **{
            "serving.model.id": "Qwen/Qwen3-8B",
            "gpu_nodes.prefill.instance_type": instance_type,
            "gpu_nodes.decode.instance_type": instance_type,
        },
    )
    instance = CATALOG[instance_type]
    placement = settings.gpu_nodes.prefill.placement("prefill")
    nodegroup = {
        "Labels": placement.labels,
        "Taints": [
            {
                "Key": t.key,
                "Value": t.value,
                "Effect": EKS_EFFECT[t.effect],
            }
            for t in placement.taints
        ],
        "Tags": node_template_tags(instance.gpus, instance.network_cards),
    }
    node = template_node("prefill", nodegroup, instance.vcpus, instance.memory_gib, instance.gpus)
    manifests = render_deployed(settings)
    groups = manifests.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    (prefill,) = [g for g in groups if g["groupName"] == "prefill"]
    assert unfit_reasons(prefill["template"]["spec"], node) == []
