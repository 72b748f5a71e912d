"""The serving manifests, rendered from each configuration: every value cross-checked against the
configuration and the catalog, none against a pasted literal. No CDK needed."""

from __future__ import annotations

import json

import pytest
import yaml

from app_config import Settings, load_settings
from app_config.node_labels import EFA_HUGEPAGES as HUGEPAGES
from app_config.node_labels import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    GPU_ROLES,
    ROLE_LABEL,
    SHARED_GROUP,
    SYSTEM_ROLE,
)
from catalog.ray_llm_image import (
    IMAGES,
    PUBLIC_REPOSITORY,
    RAY_STREAM_BATCHING_INTERVAL_MS,
    REGISTRY_ACCOUNTS,
    STREAM_BATCHING_INTERVAL_KEY,
)
from serving_manifests import ServingManifests, render
from serving_manifests.image import mirror_repository
from serving_manifests.names import (
    AUTOSCALER_METRICS_PORT,
    BENCH_LABELS,
    DASHBOARD_PORT,
    HEAD_SERVICE_ACCOUNT,
    METRICS_PORT,
    METRICS_PORT_NAME,
    RAYSERVICE_LABEL,
    SERVE_PORT,
    WORKER_SERVICE_ACCOUNT,
    endpoint_service_name,
)
from serving_manifests.namespace_objects import IRSA_ANNOTATION
from serving_manifests.rayservice import MEMORY_REQUEST_SHARE, SHARED_NODE_UCX_ENV
from serving_manifests.serve_config import (
    MULTI_CONNECTOR,
    NIXL_CONNECTOR,
    OFFLOADING_CONNECTOR,
    PD_BUILDER,
    REQUEST_ROUTERS,
    STREAMING_ROLE,
    ray_resource,
)
from tests.configurations import (
    ACCOUNT,
    CONFIGURATIONS,
    ENDPOINT,
    GCS_STORE,
    ROLE_ARN,
    context_for,
    render_deployed,
    settings_for,
)
from tools.write_manifests import main

BINDING = ENDPOINT


@pytest.fixture(scope="module", params=list(CONFIGURATIONS))
def rendered(request: pytest.FixtureRequest) -> tuple[Settings, ServingManifests]:
    settings = load_settings(context_for(request.param))
    return settings, render_deployed(settings)


def _workers(manifests: ServingManifests) -> dict[str, dict]:
    groups = manifests.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return {group["groupName"]: group for group in groups}


def _llm_configs(manifests: ServingManifests) -> dict[str, dict]:
    (application,) = manifests.serve_config["applications"]
    return {role: application["args"][f"{role}_config"] for role in GPU_ROLES}


def test_one_worker_group_per_node_group(rendered) -> None:
    """A side's own, or one for gpu_nodes.shared whose pods hold both sides."""
    settings, manifests = rendered
    assert list(_workers(manifests)) == list(settings.gpu_nodes.groups())
    assert {settings.side(role).group for role in GPU_ROLES} == set(_workers(manifests))


def test_workers_select_and_tolerate_exactly_their_node_group(rendered) -> None:
    settings, manifests = rendered
    for role, group in settings.gpu_nodes.groups().items():
        placement = group.placement(role)
        spec = _workers(manifests)[role]["template"]["spec"]
        assert spec["nodeSelector"] == placement.labels
        assert spec["tolerations"] == [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            for t in placement.taints
        ]


def test_workers_request_every_gpu_and_efa_device_of_their_node(rendered) -> None:
    settings, manifests = rendered
    for role, group in settings.gpu_nodes.groups().items():
        (container,) = _workers(manifests)[role]["template"]["spec"]["containers"]
        resources = container["resources"]
        assert resources["requests"] == resources["limits"]  # hugepages demand it
        assert resources["limits"][GPU_RESOURCE] == str(group.instance.gpus)
        assert resources["limits"][EFA_RESOURCE] == str(group.instance.network_cards)
        assert {k: resources["limits"][k] for k in HUGEPAGES} == HUGEPAGES


def test_no_service_account_of_the_app_mounts_a_kubernetes_token_by_default(rendered) -> None:
    """Defence in depth behind the pods' own setting: a pod created later with one of these
    accounts (by an admin, a Job) gets no Kubernetes API token unless it asks for one."""
    _, manifests = rendered
    assert manifests.service_accounts
    for account in manifests.service_accounts:
        assert account["automountServiceAccountToken"] is False, account["metadata"]["name"]


def test_rays_autoscaler_keeps_one_worker_pod_per_gpu_node(rendered) -> None:
    """Bounds from the node groups: never a worker pod no node could hold, never fewer than the
    nodes the group keeps; the sidecar's idle timeout from the configuration."""
    settings, manifests = rendered
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is True
    options = cluster["autoscalerOptions"]
    assert options["idleTimeoutSeconds"] == settings.serving.ray_autoscaler.idle_timeout_seconds
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["automountServiceAccountToken"] is False  # the sidecar mounts its own token
    # Neither the head nor a worker is ever moved by the Cluster Autoscaler's scale-down.
    head_annotations = cluster["headGroupSpec"]["template"]["metadata"]["annotations"]
    assert head_annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    for role, group in settings.gpu_nodes.groups().items():
        worker = _workers(manifests)[role]
        scaling = group.scaling
        bounds = (worker["minReplicas"], worker["replicas"], worker["maxReplicas"])
        assert bounds == (scaling.min_size, scaling.desired_size, scaling.max_size)
        annotations = worker["template"]["metadata"]["annotations"]
        assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
        assert worker["template"]["spec"]["automountServiceAccountToken"] is False


def test_workers_get_the_efa_environment_pod_ip_and_shared_memory(rendered) -> None:
    _, manifests = rendered
    for worker in _workers(manifests).values():
        (container,) = worker["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["FI_PROVIDER"]["value"] == "efa"
        assert env["FI_EFA_USE_DEVICE_RDMA"]["value"] == "1"
        assert env["FI_EFA_FORK_SAFE"]["value"] == "1"
        assert env["VLLM_HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["dshm"] == "/dev/shm"
        volumes = {v["name"]: v for v in worker["template"]["spec"]["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"


def test_prefill_and_decode_pods_repel_each_other(rendered) -> None:
    """Two pods of the two sides on one node fail in NIXL (EAGAIN); a shared node's one pod
    holds both sides and has no other side's pod to keep away."""
    _, manifests = rendered
    for role, worker in _workers(manifests).items():
        spec = worker["template"]["spec"]
        assert worker["template"]["metadata"]["labels"][ROLE_LABEL] == role
        if role not in GPU_ROLES:
            assert "affinity" not in spec
            continue
        (term,) = spec["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        (expression,) = term["labelSelector"]["matchExpressions"]
        assert expression["key"] == ROLE_LABEL
        assert expression["values"] == [other for other in GPU_ROLES if other != role]
        assert term["topologyKey"] == "kubernetes.io/hostname"


def test_head_runs_on_system_nodes_without_gpus(rendered) -> None:
    _, manifests = rendered
    head = manifests.rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert head["template"]["spec"]["nodeSelector"] == {ROLE_LABEL: SYSTEM_ROLE}
    (container,) = head["template"]["spec"]["containers"]
    assert GPU_RESOURCE not in json.dumps(container["resources"])
    assert head["rayStartParams"]["num-cpus"] == "0"


def test_image_and_ray_version_come_from_the_pinned_tag(rendered) -> None:
    settings, manifests = rendered
    image = IMAGES[settings.serving.image_tag]
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == image.ray_version
    mirror = mirror_repository(settings)
    if mirror:  # the user's own registry (serving.image_mirror)
        expected = f"{mirror.uri}:{image.tag}"
    elif settings.serving.image_cache.enabled:  # the account's pull-through cache of ECR Public
        prefix = settings.serving.image_cache.repository_prefix(settings.prefix)
        expected = (
            f"{ACCOUNT}.dkr.ecr.{settings.region}.amazonaws.com/{prefix}/"
            f"{PUBLIC_REPOSITORY}:{image.tag}"
        )
    else:
        account = REGISTRY_ACCOUNTS[settings.region]
        expected = f"{account}.dkr.ecr.{settings.region}.amazonaws.com/ray:{image.tag}"
    containers = [cluster["headGroupSpec"]["template"]["spec"]["containers"][0]] + [
        w["template"]["spec"]["containers"][0] for w in cluster["workerGroupSpecs"]
    ]
    assert {c["image"] for c in containers} == {expected}


def test_serve_config_is_embedded_verbatim(rendered) -> None:
    _, manifests = rendered
    embedded = yaml.safe_load(manifests.rayservice["spec"]["serveConfigV2"])
    assert embedded == manifests.serve_config


def test_pd_builder_with_the_same_model_on_both_sides(rendered) -> None:
    settings, manifests = rendered
    (application,) = manifests.serve_config["applications"]
    assert application["import_path"] == PD_BUILDER
    # The two sides and the ingress that follows decode; no proxy_* fields (ignored since 2.55).
    assert set(application["args"]) == {
        "prefill_config",
        "decode_config",
        "ingress_deployment_config",
    }
    configs = _llm_configs(manifests)
    model_ids = {c["model_loading_config"]["model_id"] for c in configs.values()}
    assert model_ids == {settings.serving.model.id}


def _nixl(transfer: dict) -> dict:
    """A side's NIXL connector: the side's whole kv_transfer_config, or the first connector of
    the MultiConnector that adds the KV offload tier."""
    if transfer["kv_connector"] == MULTI_CONNECTOR:
        return transfer["kv_connector_extra_config"]["connectors"][0]
    return transfer


def test_both_sides_pull_kv_through_nixl_with_one_backend_and_block_size(rendered) -> None:
    settings, manifests = rendered
    transfers = [
        _nixl(c["engine_kwargs"]["kv_transfer_config"]) for c in _llm_configs(manifests).values()
    ]
    assert {t["kv_connector"] for t in transfers} == {NIXL_CONNECTOR}
    assert {t["kv_role"] for t in transfers} == {"kv_both"}
    backends = {tuple(t["kv_connector_extra_config"]["backends"]) for t in transfers}
    assert backends == {(settings.serving.kv_transfer.backend,)}
    block_sizes = {c["engine_kwargs"]["block_size"] for c in _llm_configs(manifests).values()}
    assert block_sizes == {settings.serving.kv_transfer.block_size}


def test_a_side_with_a_kv_offload_tier_composes_it_after_nixl(rendered) -> None:
    """serving.<side>.kv_offload_gib_per_gpu: NIXL first (Ray 2.58's MultiConnectorBackend
    shapes the P/D requests by its first connector), then vLLM's OffloadingConnector with the
    rank's whole buffer (TP x PP GPUs); a side without a tier keeps NIXL alone."""
    settings, manifests = rendered
    for role, config in _llm_configs(manifests).items():
        transfer = config["engine_kwargs"]["kv_transfer_config"]
        side = settings.side(role)
        if not side.engine.kv_offload_gib_per_gpu:
            assert transfer["kv_connector"] == NIXL_CONNECTOR
            continue
        assert (transfer["kv_connector"], transfer["kv_role"]) == (MULTI_CONNECTOR, "kv_both")
        nixl, offload = transfer["kv_connector_extra_config"]["connectors"]
        assert nixl["kv_connector"] == NIXL_CONNECTOR
        assert offload == {
            "kv_connector": OFFLOADING_CONNECTOR,
            "kv_role": nixl["kv_role"],
            "kv_connector_extra_config": {
                "cpu_bytes_to_use": side.engine.kv_offload_gib_per_gpu
                * config["engine_kwargs"]["tensor_parallel_size"]
                * config["engine_kwargs"]["pipeline_parallel_size"]
                * 2**30
            },
        }


def test_a_workers_memory_request_grows_by_its_sides_kv_offload_tier(rendered) -> None:
    """Pinned host memory is charged to the pod's cgroup: the request (and the limit, equal to
    it) holds the share every worker gets plus the tier of every GPU of the node."""
    settings, manifests = rendered
    for name, group in settings.gpu_nodes.groups().items():
        (container,) = _workers(manifests)[name]["template"]["spec"]["containers"]
        # Each side's tier over its GPUs of the node: all of them, or its share of a shared one.
        tier = sum(
            settings.serving.engine(role).kv_offload_gib_per_gpu
            * (group.instance.gpus if name == role else getattr(group.gpus, role))
            for role in GPU_ROLES
            if name in (role, SHARED_GROUP)
        )
        expected = int(group.instance.memory_gib * MEMORY_REQUEST_SHARE) + tier
        assert container["resources"]["requests"]["memory"] == f"{expected}Gi"
        assert container["resources"]["limits"]["memory"] == f"{expected}Gi"


def test_an_offload_tier_on_prefill_leaves_decode_as_it_was() -> None:
    """The tier changes prefill's connector and pod resources alone; decode's engine config and
    pod resources are the same with and without it (every pod's reload annotation follows the
    whole Serve config, by design: serve_config.engine_reload_fingerprint)."""
    plain = render_deployed(settings_for("default"))
    tiered = render_deployed(
        settings_for("default", **{"serving.prefill.kv_offload_gib_per_gpu": "16"})
    )
    assert _llm_configs(tiered)["decode"] == _llm_configs(plain)["decode"]

    def resources(manifests: ServingManifests, role: str) -> dict:
        (container,) = _workers(manifests)[role]["template"]["spec"]["containers"]
        return container["resources"]

    assert resources(tiered, "decode") == resources(plain, "decode")
    assert resources(tiered, "prefill") != resources(plain, "prefill")
    assert _llm_configs(tiered)["prefill"] != _llm_configs(plain)["prefill"]


def test_parallelism_fits_one_node_and_bundles_pin_each_side(rendered) -> None:
    settings, manifests = rendered
    shared = settings.gpu_nodes.shared
    for role, config in _llm_configs(manifests).items():
        group = shared or getattr(settings.gpu_nodes, role)
        # The side's GPUs of a node: all of them, or its share of a shared node.
        gpus = getattr(shared.gpus, role) if shared else group.instance.gpus
        tp, pp = settings.replica_gpus(role)
        kwargs = config["engine_kwargs"]
        assert (kwargs["tensor_parallel_size"], kwargs["pipeline_parallel_size"]) == (tp, pp)
        assert tp * pp <= gpus
        bundle = config["placement_group_config"]["bundle_per_worker"]  # repeated TP x PP times
        assert (bundle["GPU"], bundle[ray_resource(role)]) == (1, 1)
        worker = _workers(manifests)[SHARED_GROUP if shared else role]
        advertised = worker["resources"][ray_resource(role)]
        assert int(advertised) == gpus  # one unit per GPU: bundles fit exactly
        assert "accelerator_type" not in config  # test_scaling_chain says why


def test_serve_replicas_per_side(rendered) -> None:
    settings, manifests = rendered
    configs = _llm_configs(manifests)
    for role, config in configs.items():
        engine = settings.serving.engine(role)
        deployment = config["deployment_config"]
        assert deployment["autoscaling_config"] == {
            "min_replicas": engine.min_replicas,
            "max_replicas": engine.max_replicas,
            "target_ongoing_requests": engine.autoscaling.target_ongoing_requests,
            "upscale_delay_s": engine.autoscaling.upscale_delay_s,
            "downscale_delay_s": engine.autoscaling.downscale_delay_s,
        }
        router = deployment["request_router_config"]["request_router_class"]
        assert router == REQUEST_ROUTERS[engine.request_router]
    # Each side's own defaults: prefill reacts to bursts faster and aims lower than decode.
    prefill, decode = (settings.serving.engine(role).autoscaling for role in ("prefill", "decode"))
    if settings.serving.prefill == type(settings.serving).model_fields["prefill"].default:
        assert prefill.upscale_delay_s < decode.upscale_delay_s
        assert prefill.target_ongoing_requests < decode.target_ongoing_requests
    for config in configs.values():
        assert not config.get("experimental_configs", {}).get(prewarm_switch())


def prewarm_switch() -> str:
    """The experimental_configs key that makes decode's constructor wait for prefill, read from
    Ray's source (2.58.0 pd_server.py PDDecodeServer._maybe_prewarm), with the proof that the
    wait ends in a failure: a bounded retry loop whose else-branch raises. A renamed key or a
    pre-warm that no longer fails fails this test: re-check scale to zero then."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("ray")
    assert spec is not None
    source = Path(str(spec.origin)).parent / "llm/_internal/serve/serving_patterns/prefill_decode"
    tree = ast.parse((source / "pd_server.py").read_text())
    (method,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "_maybe_prewarm"
    ]
    keys = [
        node.value
        for node in ast.walk(method)
        if isinstance(node, ast.Constant) and str(node.value).startswith("_prewarm")
    ]
    (gives_up,) = [node for node in ast.walk(method) if isinstance(node, ast.While)]
    assert any(isinstance(node, ast.Raise) for node in gives_up.orelse)
    (key,) = keys
    return key


@pytest.mark.parametrize("interval", ["0", "10", "12.5", "1000"])
def test_stream_batching_interval_reaches_decodes_experimental_configs_only(interval) -> None:
    settings = settings_for("default", **{"serving.stream_batching_interval_ms": interval})
    configs = _llm_configs(render_deployed(settings))
    assert configs[STREAMING_ROLE]["experimental_configs"] == {
        STREAM_BATCHING_INTERVAL_KEY: settings.serving.stream_batching_interval_ms
    }
    assert settings.serving.stream_batching_interval_ms == float(interval)
    for role in set(GPU_ROLES) - {STREAMING_ROLE}:
        assert STREAM_BATCHING_INTERVAL_KEY not in configs[role].get("experimental_configs", {})


def test_an_unset_stream_batching_interval_renders_nothing_and_keeps_rays_default(
    rendered,
) -> None:
    settings, manifests = rendered
    if settings.serving.stream_batching_interval_ms is not None:
        pytest.skip("this configuration sets an interval")
    for config in _llm_configs(manifests).values():
        assert STREAM_BATCHING_INTERVAL_KEY not in config.get("experimental_configs", {})


def _ray_source(relative: str):
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("ray")
    assert spec is not None
    return ast.parse((Path(str(spec.origin)).parent / relative).read_text())


def test_the_interval_key_and_default_are_the_ones_ray_serve_llm_reads() -> None:
    """Ray 2.58 llm_server.py LLMServer._get_batch_interval_ms reads this experimental_configs
    key and falls back to MODEL_RESPONSE_BATCH_TIMEOUT_MS, whose default (constants.py, the
    environment variable unset) is the catalog's."""
    import ast

    server = _ray_source("llm/_internal/serve/core/server/llm_server.py")
    (method,) = [
        node
        for node in ast.walk(server)
        if isinstance(node, ast.FunctionDef) and node.name == "_get_batch_interval_ms"
    ]
    strings = {n.value for n in ast.walk(method) if isinstance(n, ast.Constant)}
    names = {n.id for n in ast.walk(method) if isinstance(n, ast.Name)}
    assert STREAM_BATCHING_INTERVAL_KEY in strings
    assert "MODEL_RESPONSE_BATCH_TIMEOUT_MS" in names
    constants = _ray_source("llm/_internal/serve/constants.py")
    (assignment,) = [
        node
        for node in ast.walk(constants)
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "MODEL_RESPONSE_BATCH_TIMEOUT_MS" for t in node.targets)
    ]
    (getenv,) = [
        node
        for node in ast.walk(assignment)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getenv"
    ]
    assert getenv.args[0].value == "RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS"
    assert float(getenv.args[1].value) == RAY_STREAM_BATCHING_INTERVAL_MS


def test_only_decode_streams_so_only_its_interval_applies() -> None:
    """Ray 2.58 clamps prefill's request to one token with stream = False
    (kv_transfer/base.py clamp_request_to_single_token), and LLMServer batches only a streamed
    request (_run_request: `is_stream and batch_output_stream`); decode's stream is its own."""
    import ast

    base = _ray_source("llm/_internal/serve/engines/vllm/kv_transfer/base.py")
    (clamp,) = [
        node
        for node in ast.walk(base)
        if isinstance(node, ast.FunctionDef) and node.name == "clamp_request_to_single_token"
    ]
    assigned = {
        target.attr: node.value.value
        for node in ast.walk(clamp)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Attribute)
    }
    assert assigned["stream"] is False
    assert assigned["max_tokens"] == 1
    server = _ray_source("llm/_internal/serve/core/server/llm_server.py")
    (run,) = [
        node
        for node in ast.walk(server)
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "_run_request"
    ]
    (batching,) = [node for node in ast.walk(run) if isinstance(node, ast.If)]
    assert {n.id for n in ast.walk(batching.test) if isinstance(n, ast.Name)} == {
        "is_stream",
        "batch_output_stream",
    }
    assert STREAMING_ROLE == "decode"


def test_model_source_follows_the_configuration(rendered) -> None:
    settings, manifests = rendered
    model = settings.serving.model
    expected = {"bucket_uri": model.s3_uri} if model.s3_uri else model.id
    for config in _llm_configs(manifests).values():
        assert config["model_loading_config"]["model_source"] == expected


def test_hf_token_is_mounted_from_secrets_manager_only_when_configured(rendered) -> None:
    settings, manifests = rendered
    secret_arn = settings.serving.model.hf_token_secret_arn
    for worker in _workers(manifests).values():
        spec = worker["template"]["spec"]
        csi = [v for v in spec["volumes"] if "csi" in v]
        env = {e["name"] for e in spec["containers"][0]["env"]}
        assert bool(csi) == bool(secret_arn)
        assert ("HF_TOKEN_PATH" in env) == bool(secret_arn)
        assert "HF_TOKEN" not in env  # never the value in an environment variable
    if secret_arn:
        objects = yaml.safe_load(manifests.secret_provider_class["spec"]["parameters"]["objects"])
        assert [o["objectName"] for o in objects] == [secret_arn]
    else:
        assert manifests.secret_provider_class is None


def test_each_service_account_carries_only_its_own_irsa_role(rendered) -> None:
    """Workers: the model's role. Head: the GCS store token's role, only with fault tolerance."""
    settings, manifests = rendered
    accounts = {a["metadata"]["name"]: a["metadata"] for a in manifests.service_accounts}
    assert {a["namespace"] for a in accounts.values()} == {settings.serving.namespace}
    worker_annotations = accounts[WORKER_SERVICE_ACCOUNT]["annotations"]
    assert worker_annotations == {IRSA_ANNOTATION: ROLE_ARN}
    head = accounts[HEAD_SERVICE_ACCOUNT]
    if settings.serving.gcs_fault_tolerance.enabled:
        assert head["annotations"] == {IRSA_ANNOTATION: GCS_STORE.head_role_arn}
    else:
        assert "annotations" not in head
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    head_spec = cluster["headGroupSpec"]["template"]["spec"]
    assert head_spec["serviceAccountName"] == HEAD_SERVICE_ACCOUNT
    for worker in cluster["workerGroupSpecs"]:
        assert worker["template"]["spec"]["serviceAccountName"] == WORKER_SERVICE_ACCOUNT
    without_role = render_deployed(settings, role_arn=None).service_accounts
    worker = {a["metadata"]["name"]: a["metadata"] for a in without_role}[WORKER_SERVICE_ACCOUNT]
    assert "annotations" not in worker


def test_gcs_fault_tolerance_uses_the_store_over_tls_with_the_synced_token(rendered) -> None:
    settings, manifests = rendered
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    if not settings.serving.gcs_fault_tolerance.enabled:
        assert "gcsFaultToleranceOptions" not in cluster
        assert manifests.gcs_store_provider_class is None
        return
    options = cluster["gcsFaultToleranceOptions"]
    assert options["redisAddress"] == f"rediss://{GCS_STORE.address}"
    secret_ref = options["redisPassword"]["valueFrom"]["secretKeyRef"]
    provider = manifests.gcs_store_provider_class
    (synced,) = provider["spec"]["secretObjects"]
    assert secret_ref == {"name": synced["secretName"], "key": synced["data"][0]["key"]}
    objects = yaml.safe_load(provider["spec"]["parameters"]["objects"])
    assert [o["objectName"] for o in objects] == [GCS_STORE.auth_token_secret_arn]
    assert objects[0]["objectAlias"] == synced["data"][0]["objectName"]
    # The Secret exists only while a pod mounts the provider class: the head does.
    mounted = [
        v["csi"]["volumeAttributes"]["secretProviderClass"] for v in head["volumes"] if "csi" in v
    ]
    assert provider["metadata"]["name"] in mounted
    env = {e["name"]: e.get("value") for e in head["containers"][0]["env"]}
    assert env["RAY_REDIS_CA_CERT"].endswith(".crt")
    for worker in cluster["workerGroupSpecs"]:  # the token stays with the head
        volumes = worker["template"]["spec"]["volumes"]
        assert provider["metadata"]["name"] not in json.dumps(volumes)


def test_disruption_budgets_keep_each_sides_floor_less_one(rendered) -> None:
    """At the floor Ray's autoscaler keeps (minReplicas), a drain may take one worker: one DP
    group, where a group spans nodes (Ray Serve restarts a gang whole when one pod goes)."""
    settings, manifests = rendered
    workers = _workers(manifests)
    budgets = {
        b["spec"]["selector"]["matchLabels"][ROLE_LABEL]: b
        for b in manifests.pod_disruption_budgets
    }
    (application,) = manifests.serve_config["applications"]
    for role in workers:  # a side's group, or the shared one holding both sides
        pods = workers[role]["minReplicas"]
        pods_per_group = 1
        for side, gpus in workers[role]["resources"].items():  # the side's GPUs of each pod
            kwargs = application["args"][f"{side}_config"]["engine_kwargs"]
            group_gpus = (
                kwargs.get("data_parallel_size", 1)
                * kwargs["tensor_parallel_size"]
                * kwargs["pipeline_parallel_size"]
            )
            pods_per_group = max(pods_per_group, -(-group_gpus // int(gpus)))
        if pods < 2 * pods_per_group:  # a budget could only forbid draining the side's one group
            assert role not in budgets
            continue
        spec = budgets[role]["spec"]
        # An integer minAvailable and nothing else: RayClusters have no scale subresource.
        assert set(spec) == {"minAvailable", "selector"}
        assert spec["minAvailable"] == pods - 1
        pod_labels = workers[role]["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= pod_labels.items()
        assert spec["selector"]["matchLabels"][RAYSERVICE_LABEL] == settings.serving.name


def test_only_the_head_may_reach_the_gcs_store(rendered) -> None:
    settings, manifests = rendered
    policies = {p["metadata"]["name"]: p for p in manifests.network_policies}
    if not settings.serving.gcs_fault_tolerance.enabled:
        assert "allow-gcs-store" not in policies
        return
    spec = policies["allow-gcs-store"]["spec"]
    assert spec["podSelector"]["matchLabels"] == {RAYSERVICE_LABEL: settings.serving.name}
    assert spec["podSelector"]["matchExpressions"] == [
        {"key": "ray.io/node-type", "operator": "NotIn", "values": ["worker"]}
    ]
    (rule,) = spec["egress"]
    assert rule["to"] == [{"ipBlock": {"cidr": cidr}} for cidr in settings.network.cidr_blocks()]
    assert rule["ports"] == [{"protocol": "TCP", "port": GCS_STORE.port}]


def test_old_cluster_lingers_for_the_configured_delay(rendered) -> None:
    settings, manifests = rendered
    spec = manifests.rayservice["spec"]
    assert spec["rayClusterDeletionDelaySeconds"] == (
        settings.serving.old_cluster_deletion_delay_seconds
    )
    assert spec["upgradeStrategy"] == {"type": settings.serving.upgrade_strategy}


def test_every_ray_container_declares_the_metrics_port_the_scraper_keeps(rendered) -> None:
    _, manifests = rendered
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]] + [
        w["template"] for w in cluster["workerGroupSpecs"]
    ]
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports[METRICS_PORT_NAME] == METRICS_PORT


def test_rendering_a_fault_tolerant_service_needs_the_deployed_store() -> None:
    settings = load_settings(context_for("public-endpoint"))
    assert settings.serving.gcs_fault_tolerance.enabled
    with pytest.raises(ValueError, match="gcs_fault_tolerance"):
        render(settings, ROLE_ARN, ENDPOINT)


def test_network_policies_deny_by_default_and_open_the_endpoint_to_the_load_balancer(
    rendered,
) -> None:
    settings, manifests = rendered
    policies = {p["metadata"]["name"]: p for p in manifests.network_policies}
    assert {p["metadata"]["namespace"] for p in policies.values()} == {settings.serving.namespace}
    deny = policies["default-deny"]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    (rule,) = policies["allow-endpoint"]["spec"]["ingress"]
    # The load balancer does not preserve client IPs: its own subnets, and the bench Job.
    blocks = [peer["ipBlock"]["cidr"] for peer in rule["from"] if "ipBlock" in peer]
    assert blocks == list(ENDPOINT.load_balancer_cidrs)
    pods = [peer["podSelector"]["matchLabels"] for peer in rule["from"] if "podSelector" in peer]
    assert pods == [BENCH_LABELS]
    assert rule["ports"] == [{"protocol": "TCP", "port": SERVE_PORT}]
    for policy in policies.values():
        labels = policy["spec"]["podSelector"].get("matchLabels", {})
        assert labels.get(RAYSERVICE_LABEL, settings.serving.name) == settings.serving.name


def test_load_balancer_targets_every_ready_proxy_of_every_ray_cluster(rendered) -> None:
    settings, manifests = rendered
    binding = manifests.target_group_binding
    assert binding["metadata"]["namespace"] == settings.serving.namespace
    spec = binding["spec"]
    assert spec["serviceRef"] == {"name": endpoint_service_name(settings), "port": SERVE_PORT}
    selector = manifests.endpoint_service["spec"]["selector"]
    assert "ray.io/cluster" not in selector  # spans the old and the new cluster of an upgrade
    assert spec["targetGroupARN"] == BINDING.target_group_arn
    assert spec["targetType"] == "ip"
    assert "networking" not in spec  # the controller manages no security group rule
    before_the_load_balancer = render_deployed(settings, endpoint=False)
    assert before_the_load_balancer.target_group_binding is None


def test_kuberay_operator_reaches_dashboard_and_proxies(rendered) -> None:
    _, manifests = rendered
    policies = {p["metadata"]["name"]: p for p in manifests.network_policies}
    (rule,) = policies["allow-kuberay-operator"]["spec"]["ingress"]
    assert {port["port"] for port in rule["ports"]} == {DASHBOARD_PORT, SERVE_PORT}


def test_every_pod_of_the_service_carries_the_selector_label(rendered) -> None:
    settings, manifests = rendered
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"]] + [
        w["template"] for w in cluster["workerGroupSpecs"]
    ]
    assert {t["metadata"]["labels"][RAYSERVICE_LABEL] for t in templates} == {settings.serving.name}


def test_make_manifests_writes_one_file_per_object(tmp_path, capsys) -> None:
    main(["--out", str(tmp_path), "-c", "serving.name=demo", "--role-arn", ROLE_ARN])
    written = sorted(path.name for path in tmp_path.glob("*.yaml"))
    settings = load_settings({**context_for("default"), "serving.name": "demo"})
    expected = render(settings, ROLE_ARN).all()
    assert len(written) == len(expected) + 1  # + the readable serve-config.yaml
    assert any(name.endswith("-rayservice-demo.yaml") for name in written)
    reread = [
        yaml.safe_load((tmp_path / name).read_text()) for name in written if name[0].isdigit()
    ]
    assert reread == expected


def test_make_manifests_explains_why_a_fault_tolerant_service_cannot_be_rendered(
    tmp_path,
) -> None:
    with pytest.raises(SystemExit, match=r"gcs_fault_tolerance.*deployed serving stack"):
        main(["--out", str(tmp_path), "-c", "serving.gcs_fault_tolerance.enabled=true"])


def test_make_manifests_reports_bad_input_as_configuration_errors(tmp_path) -> None:
    with pytest.raises(SystemExit, match=r"serving\.name"):
        main(["--out", str(tmp_path), "-c", "serving.name=Not_Valid"])


def test_metrics_are_readable_from_the_vpc_and_bench_may_call_serve(rendered) -> None:
    settings, manifests = rendered
    policies = {p["metadata"]["name"]: p["spec"] for p in manifests.network_policies}
    (metrics,) = policies["allow-metrics"]["ingress"]
    assert metrics["ports"] == [
        {"protocol": "TCP", "port": port} for port in (METRICS_PORT, AUTOSCALER_METRICS_PORT)
    ]
    assert metrics["from"] == [
        {"ipBlock": {"cidr": cidr}} for cidr in settings.network.cidr_blocks()
    ]
    bench = policies["allow-pdctl-bench"]
    assert bench["podSelector"] == {"matchLabels": BENCH_LABELS}
    assert bench["egress"][0]["ports"] == [{"protocol": "TCP", "port": SERVE_PORT}]


def test_ray_token_auth_is_on_and_the_readiness_check_carries_the_token(rendered) -> None:
    """KubeRay 1.7 makes the token (a Secret per Ray cluster, RAY_AUTH_TOKEN in every Ray
    container) and sends it on its own dashboard calls; the only dashboard call of ours is the
    workers' readiness check, which must send it too or no worker would ever turn ready."""
    _, manifests = rendered
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    assert cluster["authOptions"] == {"mode": "token"}
    assert "secretName" not in cluster["authOptions"]  # KubeRay's own Secret: not in CFN
    for group in cluster["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        probe = " ".join(container["readinessProbe"]["exec"]["command"])
        dashboard_calls = [part for part in probe.split("wget") if "/api/serve/" in part]
        assert dashboard_calls
        assert all("x-ray-authorization: Bearer ${RAY_AUTH_TOKEN}" in c for c in dashboard_calls)


def test_only_the_autoscaler_sidecar_carries_a_kubernetes_api_token(rendered) -> None:
    """Ray's autoscaler sidecar patches the RayCluster with the head's service-account token;
    no other container sees it: the pods mount none by default, the head declares a projected
    token volume and only autoscalerOptions.volumeMounts (which KubeRay 1.7 appends to the
    sidecar alone, common/pod.go mergeAutoscalerOverrides) mounts it, at the path the Ray 2.58
    autoscaler reads. The GPU workers call no Kubernetes API (IRSA projects its own token)."""
    _, manifests = rendered
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]
    assert head["spec"]["automountServiceAccountToken"] is False
    token_volumes = {
        volume["name"]
        for volume in head["spec"]["volumes"]
        if any("serviceAccountToken" in s for s in volume.get("projected", {}).get("sources", []))
    }
    assert len(token_volumes) == 1
    sidecar_mounts = cluster["autoscalerOptions"]["volumeMounts"]
    assert [(m["name"], m["mountPath"], m["readOnly"]) for m in sidecar_mounts] == [
        (*token_volumes, "/var/run/secrets/kubernetes.io/serviceaccount", True)
    ]
    (volume,) = [v for v in head["spec"]["volumes"] if v["name"] in token_volumes]
    projected_paths = {
        item.get("path") or item["key"]
        for source in volume["projected"]["sources"]
        for kind in source.values()
        for item in (kind.get("items") or [kind])
    }
    assert projected_paths == {"token", "ca.crt", "namespace"}  # what the client reads
    for container in head["spec"]["containers"]:
        assert not token_volumes & {m["name"] for m in container.get("volumeMounts", [])}
    for group in cluster["workerGroupSpecs"]:
        spec = group["template"]["spec"]
        assert spec["automountServiceAccountToken"] is False
        mounted = {m["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])}
        assert not token_volumes & mounted


def test_no_checkov_skip_sits_on_a_pod_template(rendered) -> None:
    """KubeRay hashes the pod templates: a reworded reason there would start a Ray cluster."""
    _, manifests = rendered
    cluster = manifests.rayservice["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"]]
    templates += [group["template"] for group in cluster["workerGroupSpecs"]]
    for template in templates:
        assert not [k for k in template["metadata"]["annotations"] if "checkov.io" in k]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--role-arn", "garbage"], "not an IAM role ARN"),
        (["--role-arn", ROLE_ARN + "\n"], "not an IAM role ARN"),
        (["--out", "/proc/no-such-dir"], "cannot write there"),
    ],
)
def test_make_manifests_refuses_bad_arguments_in_one_line(tmp_path, args, fragment) -> None:
    with pytest.raises(SystemExit, match=fragment):
        main(["--out", str(tmp_path), *args])


def test_a_shared_nodes_pod_carries_the_ucx_settings_of_the_hand_off_inside_it(rendered) -> None:
    """On gpu_nodes.shared NIXL's UCX backend moves the KV cache between the pod's two engines:
    UCX's cuda_ipc may serve GET zero-copy (the pull direction) also without NVLink;
    pods of a side's own group move it over EFA and carry no UCX setting."""
    settings, manifests = rendered
    for name, worker in _workers(manifests).items():
        (container,) = worker["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        ucx = {key: value for key, value in env.items() if key.startswith("UCX_")}
        if name == SHARED_GROUP:
            assert ucx == SHARED_NODE_UCX_ENV
            assert ucx["UCX_CUDA_IPC_ENABLE_GET_ZCOPY"] == "y"
            assert settings.serving.kv_transfer.backend == "UCX"
        else:
            assert ucx == {}


def test_a_shared_nodes_sides_take_disjoint_shares_of_its_gpus() -> None:
    """Each side's Ray resource counts its GPUs of the node, and together they are the pod's
    GPUs: Ray gives each engine actor GPUs of its own share only."""
    settings = settings_for("trial-one-node")
    (worker,) = _workers(render_deployed(settings)).values()
    (container,) = worker["template"]["spec"]["containers"]
    shares = {role: int(worker["resources"][ray_resource(role)]) for role in GPU_ROLES}
    assert shares == settings.gpu_nodes.shared.gpus.model_dump()
    assert sum(shares.values()) == int(container["resources"]["limits"][GPU_RESOURCE])
    assert worker["groupName"] == SHARED_GROUP
