"""What happens to the running service when the configuration changes, decided by the rules of
the systems that carry the change out: KubeRay 1.7's new-cluster decision, its Serve Service
switch, the load balancer's target states, and a worker pod's way out (preStop and grace)."""

from __future__ import annotations

import copy
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from app_config import drain, endpoint_health
from serving_manifests.names import (
    ENGINE_FINGERPRINT_ANNOTATION,
    KUBERAY_CLUSTER_LABEL,
    KUBERAY_NODE_TYPE_LABEL,
    TOLERATED_TAINTS_ANNOTATION,
)
from tests.configurations import render_deployed, settings_for
from tests.network_policy_model import selector_matches

# --- KubeRay 1.7.0: when does a RayService change start a new Ray cluster? ---


def kuberay_cluster_hash(rayservice: dict[str, Any]) -> str:
    """ray-operator utils.GenerateHashWithoutReplicasAndWorkersToDelete (v1.7.0): the JSON of
    rayClusterConfig without replica counts, workersToDelete, tolerations, scheduling gates,
    upgradeStrategy and suspend. rayservice_controller.shouldPrepareNewCluster starts a new
    cluster when it differs; serveConfigV2 is not part of it and is applied in place."""
    spec = copy.deepcopy(rayservice["spec"]["rayClusterConfig"])
    for group in spec.get("workerGroupSpecs", []):
        for field in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(field, None)
        group.get("scaleStrategy", {}).pop("workersToDelete", None)
    templates = [spec["headGroupSpec"]["template"]] + [
        group["template"] for group in spec.get("workerGroupSpecs", [])
    ]
    for template in templates:
        template["spec"].pop("tolerations", None)
        template["spec"].pop("schedulingGates", None)
    spec.pop("upgradeStrategy", None)
    spec.pop("suspend", None)
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def _rayservice(**overrides: str) -> dict[str, Any]:
    return render_deployed(settings_for("default", **overrides)).rayservice


# Two decode nodes, so that replica counts can change without changing what fits.
BASE = {
    "gpu_nodes.decode.scaling": '{"min_size": 2, "desired_size": 2, "max_size": 3}',
    "serving.decode.max_replicas": "1",
}

# (change, reloads an engine): a new Ray cluster must start exactly when an engine reloads.
CHANGES = [
    ({"serving.model.id": "Qwen/Qwen3-14B"}, True),
    ({"serving.max_model_len": "16384"}, True),
    ({"serving.kv_transfer.block_size": "64"}, True),
    ({"serving.decode.tensor_parallel_size": "4"}, True),
    ({"serving.kv_transfer.backend": "UCX"}, True),
    ({"serving.prefill.gpu_memory_utilization": "0.85"}, True),
    ({"serving.image_digest": "sha256:" + "ab" * 32}, True),
    # Another registry is another image address: the pods must be new to pull from it.
    (
        {
            "serving.image_mirror": '{"repository": '
            '"210987654321.dkr.ecr.us-west-2.amazonaws.com/dlc/ray"}'
        },
        True,
    ),
    # Replica bounds are builder args too: Serve would replace every engine (make e2e measures it)
    ({"serving.decode.max_replicas": "2"}, True),
    ({"serving.prefill.min_replicas": "0"}, True),
    # Tolerations are not hashed by KubeRay, but the tolerated-taints annotation is: a new taint
    # reaches the workers through a new Ray cluster (running pods never get new tolerations).
    (
        {
            "gpu_nodes.decode.taints": '[{"key": "example.com/team", "value": "llm", '
            '"effect": "NoSchedule"}]'
        },
        True,
    ),
    # Worker counts are not hashed: KubeRay neither starts a cluster nor resizes the running one
    # (docs/operating.md, "desired_size is for creation"); the new count takes effect with the
    # next Ray cluster.
    ({"gpu_nodes.decode.scaling": '{"min_size": 2, "desired_size": 3, "max_size": 3}'}, False),
]


@pytest.mark.parametrize(("change", "reloads_engine"), CHANGES, ids=lambda v: str(v))
def test_a_new_ray_cluster_starts_exactly_when_an_engine_would_reload(
    change: dict[str, str], reloads_engine: bool
) -> None:
    before, after = _rayservice(**BASE), _rayservice(**{**BASE, **change})
    new_cluster = kuberay_cluster_hash(before) != kuberay_cluster_hash(after)
    assert new_cluster == reloads_engine


def test_without_the_fingerprint_a_model_change_would_reload_in_place() -> None:
    """The shape this replaced: the model lived only in serveConfigV2, which KubeRay applies to
    the running cluster, so the old replicas stopped and the new model loaded with nothing
    serving."""

    def without_fingerprint(service: dict[str, Any]) -> dict[str, Any]:
        service = copy.deepcopy(service)
        cluster = service["spec"]["rayClusterConfig"]
        for template in [cluster["headGroupSpec"]["template"]] + [
            g["template"] for g in cluster["workerGroupSpecs"]
        ]:
            template["metadata"]["annotations"].pop(ENGINE_FINGERPRINT_ANNOTATION)
        return service

    before = without_fingerprint(_rayservice())
    after = without_fingerprint(_rayservice(**{"serving.model.id": "Qwen/Qwen3-14B"}))
    assert kuberay_cluster_hash(before) == kuberay_cluster_hash(after)


def test_without_the_annotation_a_taint_change_would_never_reach_the_workers() -> None:
    """KubeRay 1.7 mutes tolerations in its hash: only the annotation makes the change seen."""

    def without_annotation(service: dict[str, Any]) -> dict[str, Any]:
        service = copy.deepcopy(service)
        for group in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
            group["template"]["metadata"]["annotations"].pop(TOLERATED_TAINTS_ANNOTATION)
        return service

    taint = '[{"key": "example.com/team", "value": "llm", "effect": "NoSchedule"}]'
    before = without_annotation(_rayservice(**BASE))
    after = without_annotation(_rayservice(**{**BASE, "gpu_nodes.decode.taints": taint}))
    assert before != after  # the tolerations did change
    assert kuberay_cluster_hash(before) == kuberay_cluster_hash(after)


def test_rewording_a_checkov_skip_reason_starts_no_ray_cluster(monkeypatch) -> None:
    """The reasons live on the RayService's metadata, outside rayClusterConfig."""
    from serving_manifests import rayservice

    before = _rayservice(**BASE)
    reworded = {
        check: f"{reason} (reworded)" for check, reason in rayservice.POD_CHECKOV_SKIPS.items()
    }
    monkeypatch.setattr(rayservice, "POD_CHECKOV_SKIPS", reworded)
    after = _rayservice(**BASE)
    assert before["metadata"]["annotations"] != after["metadata"]["annotations"]
    assert kuberay_cluster_hash(before) == kuberay_cluster_hash(after)


def test_a_change_to_the_apps_serve_code_starts_a_new_ray_cluster_on_that_code(
    monkeypatch,
) -> None:
    """serve_extensions/ travels as a ConfigMap named by its digest: a changed file is a new
    name in every pod template, which KubeRay hashes, and the ConfigMap stays immutable."""
    from serving_manifests import serve_extensions

    before = render_deployed(settings_for("default", **BASE))
    files = serve_extensions.package_files()
    changed = {**files, "prefix_router.py": files["prefix_router.py"] + "\n# changed\n"}
    monkeypatch.setattr(serve_extensions, "package_files", lambda: changed)
    after = render_deployed(settings_for("default", **BASE))
    assert kuberay_cluster_hash(before.rayservice) != kuberay_cluster_hash(after.rayservice)
    assert after.serve_extensions["immutable"] is True
    name = after.serve_extensions["metadata"]["name"]
    assert name != before.serve_extensions["metadata"]["name"]
    cluster = after.rayservice["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"]] + [
        group["template"] for group in cluster["workerGroupSpecs"]
    ]
    for template in templates:
        mounted = {v["configMap"]["name"] for v in template["spec"]["volumes"] if "configMap" in v}
        assert name in mounted


# --- Deleting an old Ray cluster: head and workers go together ---


def kuberay_worker_env(container: dict[str, Any], gcs_fault_tolerance: bool) -> dict[str, str]:
    """ray-operator common/pod.go configureGCSFaultTolerance (v1.7.0): with GCS fault tolerance
    a worker gets RAY_gcs_rpc_server_reconnect_timeout_s=600 unless the pod sets it; without,
    nothing. Ray's own default (60 s) applies when the variable is absent."""
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    if gcs_fault_tolerance and drain.GCS_RECONNECT_ENV not in env:
        env[drain.GCS_RECONNECT_ENV] = str(drain.KUBERAY_GCS_FT_RECONNECT_SECONDS)
    return env


def seconds_a_worker_outlives_its_head(container: dict[str, Any], gcs_ft: bool) -> int:
    env = kuberay_worker_env(container, gcs_ft)
    return int(env.get(drain.GCS_RECONNECT_ENV, drain.RAY_GCS_RECONNECT_DEFAULT_SECONDS))


@pytest.mark.parametrize("gcs_ft", [False, True], ids=["gcs-ft-off", "gcs-ft-on"])
def test_an_old_clusters_workers_outlive_the_head_for_their_whole_drain(gcs_ft: bool) -> None:
    """KubeRay deletes the old RayCluster's head with its workers; the head has no preStop and
    goes within its default grace. A worker's raylet then exits once the GCS has been gone for
    RAY_gcs_rpc_server_reconnect_timeout_s, taking its streams with it: that must cover the
    worker's preStop drain and Ray's SIGTERM drain (its termination grace period)."""
    overrides = {"serving.gcs_fault_tolerance.enabled": "true"} if gcs_ft else {}
    service = _rayservice(**overrides)
    for group in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        spec = group["template"]["spec"]
        (container,) = spec["containers"]
        outlives = seconds_a_worker_outlives_its_head(container, gcs_ft)
        assert outlives >= spec["terminationGracePeriodSeconds"]
        if gcs_ft:  # never shorter than what KubeRay would have given a restarted head
            assert outlives >= drain.KUBERAY_GCS_FT_RECONNECT_SECONDS
    # The model says no to what KubeRay does on its own without GCS fault tolerance.
    bare = {"env": []}
    assert seconds_a_worker_outlives_its_head(bare, False) < drain.termination_grace_seconds(
        settings_for("default").serving.drain_timeout_seconds
    )


# --- The traffic switch of a NewCluster upgrade, second by second ---


def kuberay_pod_labels(template: dict[str, Any], cluster: str, node_type: str) -> dict[str, str]:
    return {
        **template["metadata"]["labels"],
        KUBERAY_CLUSTER_LABEL: cluster,
        KUBERAY_NODE_TYPE_LABEL: node_type,
    }


def healthy_targets_over_time(
    selector_at: Any, pods: list[dict[str, Any]], until: int
) -> list[int]:
    """Healthy load balancer targets each second. A pod is an endpoint while it is ready and
    the Service's selector (possibly changing over time) matches it; the load balancer
    controller then registers it and it turns healthy after the registration time and
    HEALTHY_THRESHOLD checks, and a target that leaves the endpoints drains at once (no new
    connections). A switch that takes every old target out before a new one is healthy is an
    outage."""
    to_healthy = endpoint_health.seconds_until_new_targets_healthy()
    joined: list[int | None] = [None] * len(pods)  # when each pod last became an endpoint
    timeline = []
    for second in range(until):
        selector = {"matchLabels": selector_at(second)}
        healthy = 0
        for index, pod in enumerate(pods):
            member = pod["ready_from"] <= second < pod["gone_at"] and selector_matches(
                selector, pod["labels"]
            )
            if not member:
                joined[index] = None
            elif joined[index] is None:
                joined[index] = second
            if member and second - joined[index] >= to_healthy:
                healthy += 1
        timeline.append(healthy)
    return timeline


@pytest.fixture(scope="module")
def upgrade() -> dict[str, Any]:
    """One side's worker before and after a model change; the old cluster serves from the
    start, the new one is ready at SWITCH and KubeRay deletes the old one after the delay."""
    settings = settings_for("default")
    manifests = render_deployed(settings)
    (worker, *_) = manifests.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    switch = 600
    delay = settings.serving.old_cluster_deletion_delay_seconds
    old = {
        "labels": kuberay_pod_labels(worker["template"], "pd-llm-old", "worker"),
        "ready_from": 0,
        "gone_at": switch + delay,
    }
    new = {
        "labels": kuberay_pod_labels(worker["template"], "pd-llm-new", "worker"),
        "ready_from": switch,
        "gone_at": 10**9,
    }
    return {
        "ours": manifests.endpoint_service["spec"]["selector"],
        "pods": [old, new],
        "switch": switch,
        "end": switch + delay + 300,
    }


def test_the_endpoint_keeps_a_healthy_target_through_a_new_cluster_upgrade(upgrade) -> None:
    ours = upgrade["ours"]
    timeline = healthy_targets_over_time(lambda _: ours, upgrade["pods"], upgrade["end"])
    settle = endpoint_health.seconds_until_new_targets_healthy()
    assert min(timeline[settle:]) >= 1  # from the first target's health onward, never none


def test_kuberays_one_step_switch_would_leave_no_healthy_target(upgrade) -> None:
    """The shape this replaced: the load balancer bound to <name>-serve-svc, whose selector
    KubeRay moves from the old cluster to the new one in one update (ray-operator
    rayservice_controller.reconcileServices, v1.7.0)."""
    switch = upgrade["switch"]

    def kuberay_selector(second: int) -> dict[str, str]:
        cluster = "pd-llm-old" if second < switch else "pd-llm-new"
        return {KUBERAY_CLUSTER_LABEL: cluster}

    timeline = healthy_targets_over_time(kuberay_selector, upgrade["pods"], upgrade["end"])
    gap = [s for s in range(switch, upgrade["end"]) if timeline[s] == 0]
    assert len(gap) == endpoint_health.seconds_until_new_targets_healthy()


def test_the_old_cluster_outlives_the_new_targets_turning_healthy() -> None:
    settings = settings_for("default")
    delay = settings.serving.old_cluster_deletion_delay_seconds
    assert delay >= endpoint_health.seconds_until_new_targets_healthy()


# --- A worker pod's way out: preStop, grace period, deregistration delay ---


def test_grace_covers_the_prestop_and_rays_own_drain_and_the_load_balancer_waits_as_long():
    settings = settings_for("default")
    manifests = render_deployed(settings)
    drain_timeout = settings.serving.drain_timeout_seconds
    serve = manifests.serve_config["applications"][0]["args"]
    for role in ("prefill", "decode"):
        assert serve[f"{role}_config"]["deployment_config"]["graceful_shutdown_timeout_s"] == (
            drain_timeout
        )
    for group in manifests.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        grace = group["template"]["spec"]["terminationGracePeriodSeconds"]
        # Kubernetes counts the preStop and the time after SIGTERM against one grace period.
        assert grace > drain.SETTLE_SECONDS + drain_timeout + drain.RAY_SIGTERM_DRAIN_SECONDS
    assert drain.deregistration_delay_seconds(drain_timeout) >= drain_timeout


class _Metrics(http.server.BaseHTTPRequestHandler):
    """Serves what a Ray node's metrics port would: the replicas' in-flight request gauge."""

    values: list[float] = []  # one value per scrape; the last repeats

    def do_GET(self) -> None:
        value = self.values.pop(0) if len(self.values) > 1 else self.values[0]
        body = (
            "# TYPE ray_serve_replica_processing_queries gauge\n"
            f'ray_serve_replica_processing_queries{{deployment="decode"}} {value}\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def metrics_server() -> Iterator[tuple[str, type[_Metrics]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics", _Metrics
    finally:
        server.shutdown()


def run_prestop(metrics_url: str, drain_seconds: int) -> float:
    """The worker's preStop exactly as rendered, in bash, against a local metrics server."""
    if not shutil.which("wget"):
        if os.environ.get("CI"):
            pytest.fail("wget is needed to run the preStop hook as the image does")
        pytest.skip("wget is not installed")
    manifests = render_deployed(settings_for("default"))
    (worker, *_) = manifests.rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    (container,) = worker["template"]["spec"]["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update(
        LLM_SERVING_DRAIN_SECONDS=str(drain_seconds),
        LLM_SERVING_DRAIN_SETTLE_SECONDS="0",
        LLM_SERVING_DRAIN_POLL_SECONDS="0.2",
        LLM_SERVING_DRAIN_METRICS_URL=metrics_url,
        PATH=os.environ["PATH"],
    )
    started = time.monotonic()
    subprocess.run(command, env=env, check=True, timeout=drain_seconds + 10)
    return time.monotonic() - started


def test_prestop_returns_once_the_nodes_replicas_are_idle(metrics_server) -> None:
    url, handler = metrics_server
    handler.values = [3, 2, 1, 0]
    assert run_prestop(url, drain_seconds=8) < 4


def test_prestop_waits_out_the_drain_timeout_while_streams_run(metrics_server) -> None:
    url, handler = metrics_server
    handler.values = [1]
    elapsed = run_prestop(url, drain_seconds=3)
    assert 2 <= elapsed < 5  # bash's SECONDS ticks in whole seconds: within one of the bound


def test_prestop_treats_unreadable_metrics_as_busy() -> None:
    elapsed = run_prestop("http://127.0.0.1:9/metrics", drain_seconds=3)
    assert elapsed >= 2


def test_a_pinned_digest_names_the_same_bytes_for_every_ray_pod() -> None:
    digest = "sha256:" + "cd" * 32
    cluster = _rayservice(**{"serving.image_digest": digest})["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]
    ]
    images = {c["image"] for t in templates for c in t["spec"]["containers"]}
    (image,) = images
    assert image.endswith(f"/ray@{digest}")


def test_a_new_node_count_reaches_only_the_next_ray_cluster() -> None:
    """KubeRay 1.7 leaves the running cluster alone when only worker counts change (the hash
    excludes them, and shouldUpdateCluster finds nothing to do): the RayService carries the new
    count, which a new Ray cluster (the next Serve or image change) starts with."""
    before = _rayservice(**BASE)
    after = _rayservice(
        **{**BASE, "gpu_nodes.decode.scaling": '{"min_size": 2, "desired_size": 3, "max_size": 3}'}
    )
    assert kuberay_cluster_hash(before) == kuberay_cluster_hash(after)
    counts = [
        {g["groupName"]: g["replicas"] for g in svc["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
        for svc in (before, after)
    ]
    assert counts[0]["decode"] == 2
    assert counts[1]["decode"] == 3
