"""Every flow docs/security.md documents, evaluated against the rendered network policies the way
the VPC CNI enforces them (tests/network_policy_model.py): Services resolved by their selectors, and
ClusterIP traffic admitted only when a policy's pod peer matches the Service's selector."""

from __future__ import annotations

from typing import Any

import pytest

from app_config import Settings
from catalog.helm_charts import KUBERAY_OPERATOR
from pdctl import bench_job, efa_jobs
from serving_manifests import ServingManifests
from serving_manifests.names import (
    DASHBOARD_PORT,
    EFA_CHECK_FIRST_PORT,
    KUBERAY_CLUSTER_LABEL,
    KUBERAY_NODE_TYPE_LABEL,
    METRICS_PORT,
    SERVE_PORT,
    efa_check_ports,
    kuberay_serve_service_name,
)
from tests.configurations import render_deployed, settings_for
from tests.network_policy_model import L4_ENTRIES_PER_PEER, Cluster, Flow, Pod, Service

RAY_CLUSTER = "pd-llm-abcde"  # what KubeRay names the RayService's current Ray cluster
GCS_PORT = 6379
# Addresses inside the VPC that are not pods: the load balancer's, the managed scraper's
# interfaces, the GCS store's primary; and one on the internet.
LOAD_BALANCER_IP = "10.0.96.45"  # in the load balancer's own subnet (ENDPOINT example)
OTHER_WORKLOAD_IP = "10.0.70.9"  # a pod of another namespace, in the nodes' private subnet
SCRAPER_IP = "10.0.1.17"
GCS_STORE_IP = "10.0.2.33"
INTERNET_IP = "52.94.1.1"
# Each Ray pod's node (its primary IP, in the nodes' private subnet like the pods' own).
NODE_IPS = {"head": "10.0.64.200", "prefill": "10.0.64.201", "decode": "10.0.64.202"}


def kuberay_pod(name: str, template: dict[str, Any], node_type: str, ip: str, ns: str) -> Pod:
    """A pod as KubeRay creates it: the template's labels plus KubeRay's own, on its node."""
    labels = {
        **template["metadata"]["labels"],
        KUBERAY_CLUSTER_LABEL: RAY_CLUSTER,
        KUBERAY_NODE_TYPE_LABEL: node_type,
    }
    return Pod(name, ns, labels, ip, NODE_IPS.get(name))


@pytest.fixture(scope="module", params=["default", "public-endpoint"])
def world(request) -> tuple[Settings, ServingManifests, Cluster, dict[str, Pod], dict]:
    settings = settings_for(request.param)
    manifests = render_deployed(settings)
    ns = settings.serving.namespace
    cluster_config = manifests.rayservice["spec"]["rayClusterConfig"]
    pods = {
        "head": kuberay_pod("head", cluster_config["headGroupSpec"]["template"], "head",
                            "10.0.64.10", ns),
    }  # fmt: skip
    for index, group in enumerate(cluster_config["workerGroupSpecs"]):
        pods[group["groupName"]] = kuberay_pod(
            group["groupName"], group["template"], "worker", f"10.0.64.{20 + index}", ns
        )
    job = bench_job.job_manifest(
        "bench", ns, "image", bench_job.BenchParameters("http://x", "m", 1, 1, 1, 1)
    )
    pods["bench"] = Pod("bench", ns, job["spec"]["template"]["metadata"]["labels"], "10.0.64.40")
    plan = efa_jobs.plan_for(settings, "efa")
    for role, ip in (("prefill", "10.0.64.50"), ("decode", "10.0.64.51")):
        job = efa_jobs.job_manifest(plan, role)
        pods[f"efa-{role}"] = Pod(
            f"efa-{role}", ns, job["spec"]["template"]["metadata"]["labels"], ip
        )
    pods["kuberay"] = Pod(
        "kuberay-operator",
        KUBERAY_OPERATOR.namespace,
        {"app.kubernetes.io/name": "kuberay-operator"},
        "10.0.65.5",
    )
    pods["coredns"] = Pod("coredns", "kube-system", {"k8s-app": "kube-dns"}, "10.0.65.9")
    pods["gcs-store"] = Pod("gcs-store", "outside", {}, GCS_STORE_IP)
    pods["internet"] = Pod("internet", "outside", {}, INTERNET_IP)
    services = {
        "endpoint": _service(manifests.endpoint_service, "172.20.10.1"),
        "kube-dns": Service(
            "kube-dns",
            "kube-system",
            {"k8s-app": "kube-dns"},
            [
                {"port": 53, "targetPort": 53, "protocol": "UDP"},
                {"port": 53, "targetPort": 53, "protocol": "TCP"},
            ],
            "172.20.0.10",
        ),
        # ray-operator common/service.go BuildServeService (v1.7.0): one cluster's serving pods.
        "kuberay-serve": Service(
            kuberay_serve_service_name(settings),
            ns,
            {KUBERAY_CLUSTER_LABEL: RAY_CLUSTER, "ray.io/serve": "true"},
            [{"port": SERVE_PORT, "targetPort": SERVE_PORT, "protocol": "TCP"}],
            "172.20.10.2",
        ),
    }
    namespaces = {
        name: {"kubernetes.io/metadata.name": name}
        for name in (ns, "kube-system", KUBERAY_OPERATOR.namespace, "outside")
    }
    model = Cluster(policies=manifests.network_policies, namespaces=namespaces)
    return settings, manifests, model, pods, services


def _service(manifest: dict[str, Any], cluster_ip: str) -> Service:
    return Service(
        manifest["metadata"]["name"],
        manifest["metadata"]["namespace"],
        manifest["spec"]["selector"],
        [{**port, "protocol": port.get("protocol", "TCP")} for port in manifest["spec"]["ports"]],
        cluster_ip,
    )


def _workers(pods: dict[str, Pod]) -> list[Pod]:
    return [pods["prefill"], pods["decode"]]


def test_the_load_balancer_reaches_every_worker_proxy(world) -> None:
    _, _, model, pods, _ = world
    for worker in _workers(pods):
        assert model.allows(Flow(LOAD_BALANCER_IP, worker, SERVE_PORT))


def test_no_other_workload_in_the_vpc_reaches_the_model_api(world) -> None:
    """The load balancer has subnets of its own, so the pods admit exactly its addresses: a
    pod of another namespace (its address in the nodes' subnet) must go through the endpoint."""
    _, _, model, pods, _ = world
    for worker in _workers(pods):
        assert not model.allows(Flow(OTHER_WORKLOAD_IP, worker, SERVE_PORT))


def test_the_bench_job_reaches_serve_through_the_endpoint_service(world) -> None:
    _, _, model, pods, services = world
    for worker in _workers(pods):
        assert model.allows(Flow(pods["bench"], worker, SERVE_PORT, via=services["endpoint"]))


def test_kuberays_serve_service_would_drop_the_bench_jobs_traffic(world) -> None:
    """Why pdctl bench no longer uses <name>-serve-svc: its selector (ray.io/cluster,
    ray.io/serve) names none of the labels the policy's pod peer selects, so the VPC CNI leaves
    its ClusterIP out of the allowed addresses, although the pods behind it are allowed."""
    _, _, model, pods, services = world
    worker = pods["decode"]
    assert model.allows(Flow(pods["bench"], worker, SERVE_PORT))  # the pod IP itself: allowed
    assert not model.allows(Flow(pods["bench"], worker, SERVE_PORT, via=services["kuberay-serve"]))


def test_a_pods_own_node_reaches_every_port_of_it_and_another_node_only_what_policies_admit(
    world,
) -> None:
    """The VPC CNI agent's node-IP rule: whatever connects from a pod's own node gets in, on
    every port. A port forward through a node (AWS-StartPortForwardingSessionToRemoteHost)
    connects from there: that is how such a tunnel reached Serve's port unsigned, which is why
    the stacks' tunnels have fixed destinations (tests/stacks/test_tunnel_destinations.py).
    Another node's address is one more VPC address: no Serve port, no GCS."""
    _, _, model, pods, _ = world
    ray_pods = (pods["head"], *_workers(pods))
    for pod in ray_pods:
        assert pod.node_ip
        for port in (SERVE_PORT, DASHBOARD_PORT, GCS_PORT, METRICS_PORT, 10002, 20001):
            assert model.allows(Flow(pod.node_ip, pod, port)), (pod.name, port)
        other_node = next(p.node_ip for p in ray_pods if p.node_ip != pod.node_ip)
        assert not model.allows(Flow(other_node, pod, SERVE_PORT))
        assert not model.allows(Flow(other_node, pod, GCS_PORT))


def test_the_scraper_reads_every_ray_pods_metrics(world) -> None:
    _, _, model, pods, _ = world
    for pod in (pods["head"], *_workers(pods)):
        assert model.allows(Flow(SCRAPER_IP, pod, METRICS_PORT))


def test_kuberay_reaches_the_dashboard_and_the_head_proxy(world) -> None:
    _, _, model, pods, _ = world
    for port in (DASHBOARD_PORT, SERVE_PORT):
        assert model.allows(Flow(pods["kuberay"], pods["head"], port))


def test_head_and_workers_reach_each_other_and_workers_read_serve_status(world) -> None:
    """GCS, raylets, object transfers and NIXL side channels; the workers' readiness probe
    reads the application's status from the head's dashboard (the head Service is headless in
    KubeRay 1.7, so the pod IP is what the workers dial)."""
    _, _, model, pods, _ = world
    for worker in _workers(pods):
        assert model.allows(Flow(worker, pods["head"], GCS_PORT))
        assert model.allows(Flow(worker, pods["head"], DASHBOARD_PORT))
        assert model.allows(Flow(pods["head"], worker, 10002))
    assert model.allows(Flow(pods["decode"], pods["prefill"], 20001))


def test_every_ray_pod_resolves_names_through_the_dns_service(world) -> None:
    _, _, model, pods, services = world
    for pod in (pods["head"], *_workers(pods), pods["bench"]):
        assert model.allows(Flow(pod, pods["coredns"], 53, "UDP", via=services["kube-dns"]))


def test_ray_pods_reach_https_and_nothing_else_outside(world) -> None:
    _, _, model, pods, _ = world
    for pod in (pods["head"], *_workers(pods)):
        assert model.allows(Flow(pod, pods["internet"], 443))
        assert not model.allows(Flow(pod, pods["internet"], 80))


def test_only_the_head_reaches_the_gcs_store(world) -> None:
    settings, _, model, pods, _ = world
    if not settings.serving.gcs_fault_tolerance.enabled:
        pytest.skip("this configuration has no GCS store")
    assert model.allows(Flow(pods["head"], pods["gcs-store"], GCS_PORT))
    for worker in _workers(pods):
        assert not model.allows(Flow(worker, pods["gcs-store"], GCS_PORT))


def test_the_bench_job_reaches_nothing_but_serve_and_https(world) -> None:
    _, _, model, pods, _ = world
    assert not model.allows(Flow(pods["bench"], pods["head"], DASHBOARD_PORT))
    assert not model.allows(Flow(pods["bench"], pods["head"], GCS_PORT))


def test_the_efa_check_client_reaches_its_server_on_the_control_ports_only(world) -> None:
    """fi_pingpong's control sockets, one per device pair, are the check's only IP traffic (the
    ping-pongs are EFA); each pod finds the other through DNS. Every pair's port must survive
    the agent's 24 entries per peer: p5 runs 32 pairs."""
    settings, _, model, pods, services = world
    client, server = pods["efa-prefill"], pods["efa-decode"]
    pairs = efa_jobs.plan_for(settings, "efa").pairs
    assert pairs > L4_ENTRIES_PER_PEER  # the default's p5 nodes: the limit is in play
    for port in efa_check_ports(pairs):
        assert model.allows(Flow(client, server, port))
    assert not model.allows(Flow(client, server, EFA_CHECK_FIRST_PORT + pairs))
    assert not model.allows(Flow(client, server, 22))
    assert not model.allows(Flow(client, pods["internet"], 443))
    for pod in (client, server):
        assert model.allows(Flow(pod, pods["coredns"], 53, "UDP", via=services["kube-dns"]))


def test_single_ports_past_the_agents_24_entries_per_peer_are_not_enforced() -> None:
    """The model itself: 32 single ports to one peer lose the last 8; one range keeps all."""
    labels = {"app": "x"}
    server, client = Pod("s", "ns", labels, "10.0.0.2"), Pod("c", "ns", labels, "10.0.0.3")
    peers = [{"podSelector": {"matchLabels": labels}}]

    def policy(ports: list[dict]) -> Cluster:
        spec = {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [
            {"from": peers, "ports": ports}]}  # fmt: skip
        document = {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}
        return Cluster(policies=[document], namespaces={"ns": {}})

    single = policy([{"protocol": "TCP", "port": 1000 + i} for i in range(32)])
    assert single.allows(Flow(client, server, 1000 + 23))
    assert not single.allows(Flow(client, server, 1000 + 24))
    ranged = policy([{"protocol": "TCP", "port": 1000, "endPort": 1031}])
    assert ranged.allows(Flow(client, server, 1031))


def test_the_efa_check_pods_and_the_ray_pods_stay_apart(world) -> None:
    _, _, model, pods, _ = world
    for efa in (pods["efa-prefill"], pods["efa-decode"]):
        for ray in (pods["head"], *_workers(pods)):
            assert not model.allows(Flow(efa, ray, GCS_PORT))
            assert not model.allows(Flow(ray, efa, EFA_CHECK_FIRST_PORT))


def test_the_heads_autoscaler_reaches_the_kubernetes_api(world) -> None:
    """Ray's autoscaler sidecar (in the head pod) patches the RayCluster: the API server's
    endpoints are the control plane's ENIs in the VPC, reached through the `kubernetes` Service
    (no selector) on 443."""
    _, _, model, pods, _ = world
    api_server = Pod("api-server", "outside", {}, "10.0.0.50")
    kubernetes = Service(
        "kubernetes", "default", None, [{"port": 443, "targetPort": 443, "protocol": "TCP"}],
        "172.20.0.1",
    )  # fmt: skip
    assert model.allows(Flow(pods["head"], api_server, 443, via=kubernetes))
    assert model.allows(Flow(pods["head"], api_server, 443))
