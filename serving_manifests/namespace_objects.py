"""The namespace and what lives in it beside the RayService: service account, network policies,
the endpoint Service and the Hugging Face token's SecretProviderClass."""

from __future__ import annotations

from typing import Any

import yaml

from app_config import Settings
from app_config.derived_names import pod_disruption_budget_name
from app_config.efa_check import device_pairs
from app_config.node_labels import ROLE_LABEL
from catalog.helm_charts import KUBERAY_OPERATOR
from serving_manifests.names import (
    AUTOSCALER_METRICS_PORT,
    BENCH_LABELS,
    DASHBOARD_PORT,
    EFA_CHECK_LABELS,
    GCS_STORE_AUTH,
    GCS_STORE_AUTH_KEY,
    HEAD_SERVICE_ACCOUNT,
    HF_TOKEN_ALIAS,
    HF_TOKEN_PROVIDER_CLASS,
    KUBERAY_NODE_TYPE_LABEL,
    METRICS_PORT,
    MODEL_CACHE_CLAIM,
    MODEL_CACHE_HOST_PATH,
    RAYSERVICE_LABEL,
    SERVE_PORT,
    WORKER_SERVICE_ACCOUNT,
    EndpointBinding,
    GcsStoreBinding,
    efa_check_port_entry,
    endpoint_binding_name,
    endpoint_service_name,
    model_cache_volume_name,
)
from serving_manifests.templates import load, load_all

IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"


def render_namespace(settings: Settings) -> dict[str, Any]:
    namespace = load("namespace.yaml")
    namespace["metadata"]["name"] = settings.serving.namespace
    return namespace


def render_service_accounts(
    settings: Settings, worker_role_arn: str | None, head_role_arn: str | None = None
) -> list[dict[str, Any]]:
    """The head's (the GCS store's token, if any) and the workers' (the model's, if any)."""
    accounts = []
    for name, role_arn in (
        (HEAD_SERVICE_ACCOUNT, head_role_arn),
        (WORKER_SERVICE_ACCOUNT, worker_role_arn),
    ):
        account = load("service-account.yaml")
        account["metadata"].update(name=name, namespace=settings.serving.namespace)
        if role_arn:
            account["metadata"]["annotations"] = {IRSA_ANNOTATION: role_arn}
        else:
            del account["metadata"]["annotations"]
        accounts.append(account)
    return accounts


def render_network_policies(
    settings: Settings,
    store: GcsStoreBinding | None = None,
    endpoint: EndpointBinding | None = None,
) -> list[dict[str, Any]]:
    """``endpoint`` names the load balancer's subnets; without it (an offline render) the Serve
    port is admitted from the VPC, as no narrower range is known."""
    policies = load_all("network-policies.yaml")
    if store:
        policies.append(_gcs_store_policy(settings, store))
    vpc = [{"ipBlock": {"cidr": cidr}} for cidr in settings.network.cidr_blocks()]
    for policy in policies:
        policy["metadata"]["namespace"] = settings.serving.namespace
        spec = policy["spec"]
        labels = spec["podSelector"].get("matchLabels", {})
        if RAYSERVICE_LABEL in labels:
            labels[RAYSERVICE_LABEL] = settings.serving.name
        for rule in spec.get("ingress", []) + spec.get("egress", []):
            for peer in rule.get("from", []) + rule.get("to", []):
                _retarget_peer(peer, settings)
        name = policy["metadata"]["name"]
        if name == "allow-endpoint":
            (rule,) = spec["ingress"]
            load_balancer = (
                [{"ipBlock": {"cidr": cidr}} for cidr in endpoint.load_balancer_cidrs]
                if endpoint
                else vpc
            )
            # The load balancer (its own subnets) and the bench Job; no other workload.
            rule["from"] = [*load_balancer, {"podSelector": {"matchLabels": dict(BENCH_LABELS)}}]
            rule["ports"] = [{"protocol": "TCP", "port": SERVE_PORT}]
        if name == "allow-metrics":
            (rule,) = spec["ingress"]
            rule["from"] = vpc
            rule["ports"] = [
                {"protocol": "TCP", "port": port}
                for port in (METRICS_PORT, AUTOSCALER_METRICS_PORT)
            ]
        if name == "allow-pdctl-bench":
            spec["podSelector"] = {"matchLabels": dict(BENCH_LABELS)}
            spec["egress"][0]["ports"] = [{"protocol": "TCP", "port": SERVE_PORT}]
        if name == "allow-pdctl-efa-check":
            _fill_efa_check_policy(spec, settings)
        if name == "allow-kuberay-operator":
            (rule,) = spec["ingress"]
            rule["ports"] = [
                {"protocol": "TCP", "port": port} for port in (DASHBOARD_PORT, SERVE_PORT)
            ]
    return policies


def _fill_efa_check_policy(spec: dict[str, Any], settings: Settings) -> None:
    peers = [{"podSelector": {"matchLabels": dict(EFA_CHECK_LABELS)}}]
    nodes = settings.gpu_nodes
    pairs = device_pairs(nodes.prefill.instance.network_cards, nodes.decode.instance.network_cards)
    ports = [efa_check_port_entry(pairs)]
    spec["podSelector"] = {"matchLabels": dict(EFA_CHECK_LABELS)}
    (ingress,), (egress,) = spec["ingress"], spec["egress"]
    ingress.update({"from": peers, "ports": ports})
    egress.update({"to": peers, "ports": ports})


def _gcs_store_policy(settings: Settings, store: GcsStoreBinding) -> dict[str, Any]:
    policy = load("gcs-store-network-policy.yaml")  # namespaced with the others by the caller
    (rule,) = policy["spec"]["egress"]
    # The store's address resolves inside the VPC; its subnets are the VPC's private ones.
    rule["to"] = [{"ipBlock": {"cidr": cidr}} for cidr in settings.network.cidr_blocks()]
    rule["ports"] = [{"protocol": "TCP", "port": store.port}]
    return policy


def _retarget_peer(peer: dict[str, Any], settings: Settings) -> None:
    pod_labels = peer.get("podSelector", {}).get("matchLabels", {})
    if RAYSERVICE_LABEL in pod_labels:
        pod_labels[RAYSERVICE_LABEL] = settings.serving.name
    namespace_labels = peer.get("namespaceSelector", {}).get("matchLabels", {})
    if namespace_labels and peer.get("podSelector") is None:  # the operator's namespace
        existing = settings.cluster.existing
        namespace_labels["kubernetes.io/metadata.name"] = (
            existing.addons.namespace("kuberay", KUBERAY_OPERATOR.namespace)
            if existing
            else KUBERAY_OPERATOR.namespace
        )


def render_target_group_binding(
    settings: Settings, binding: EndpointBinding | None
) -> dict[str, Any] | None:
    """None until the load balancer exists: its ARNs come from CloudFormation."""
    if binding is None:
        return None
    document = load("target-group-binding.yaml")
    document["metadata"].update(
        name=endpoint_binding_name(settings), namespace=settings.serving.namespace
    )
    spec = document["spec"]
    spec["serviceRef"] = {"name": endpoint_service_name(settings), "port": SERVE_PORT}
    spec["targetGroupARN"] = binding.target_group_arn
    return document


def render_endpoint_service(settings: Settings) -> dict[str, Any]:
    service = load("endpoint-service.yaml")
    service["metadata"].update(
        name=endpoint_service_name(settings), namespace=settings.serving.namespace
    )
    service["spec"]["selector"] = {
        RAYSERVICE_LABEL: settings.serving.name,
        KUBERAY_NODE_TYPE_LABEL: "worker",
    }
    (port,) = service["spec"]["ports"]
    port.update(port=SERVE_PORT, targetPort=SERVE_PORT)
    return service


def render_model_cache(settings: Settings) -> list[dict[str, Any]]:
    """The node-local weights cache: the stack's PersistentVolume and the namespace's claim."""
    volume, claim = load_all("model-cache.yaml")
    name = model_cache_volume_name(settings)
    volume["metadata"]["name"] = name
    volume["spec"]["claimRef"] = {
        "namespace": settings.serving.namespace,
        "name": MODEL_CACHE_CLAIM,
    }
    volume["spec"]["hostPath"]["path"] = MODEL_CACHE_HOST_PATH
    claim["metadata"].update(name=MODEL_CACHE_CLAIM, namespace=settings.serving.namespace)
    claim["spec"]["volumeName"] = name
    return [volume, claim]


def render_secret_provider_class(settings: Settings) -> dict[str, Any] | None:
    secret_arn = settings.serving.model.hf_token_secret_arn
    if not secret_arn:
        return None
    return _provider_class(
        "secret-provider-class.yaml", HF_TOKEN_PROVIDER_CLASS, settings, secret_arn, HF_TOKEN_ALIAS
    )


def render_pod_disruption_budgets(settings: Settings) -> list[dict[str, Any]]:
    budgets = []
    for role, group in settings.gpu_nodes.groups().items():
        # The side's floor: Ray's autoscaler keeps at least min_size workers (one per node), and
        # a drain may take one of those. Above the floor the count moves with the load; EKS
        # drains (updates, repair) one node at a time, and the Cluster Autoscaler never drains a
        # Ray worker's node. A side whose floor is one node gets no budget: it could only
        # forbid draining that node.
        # A DP group spanning nodes restarts whole when any of its pods goes (Ray Serve's
        # RESTART_GANG): one node at a time then means one group at a time, and a side whose
        # floor is a single group gets no budget, as a single node does not.
        # A shared node's pod holds both sides, each within the node (rule replica-fit): one
        # node at a time is one replica of each side at a time.
        floor = group.scaling.min_size
        nodes = max(side.nodes_per_replica for side in settings.sides() if side.group == role)
        if floor < 2 * nodes:
            continue
        budget = load("pod-disruption-budget.yaml")
        budget["spec"]["minAvailable"] = floor - 1
        budget["metadata"].update(
            name=pod_disruption_budget_name(settings, role), namespace=settings.serving.namespace
        )
        budget["spec"]["selector"]["matchLabels"] = {
            RAYSERVICE_LABEL: settings.serving.name,
            ROLE_LABEL: role,
        }
        budgets.append(budget)
    return budgets


def render_gcs_store_provider_class(
    settings: Settings, store: GcsStoreBinding | None
) -> dict[str, Any] | None:
    if store is None:
        return None
    provider_class = _provider_class(
        "gcs-store-secret-provider-class.yaml",
        GCS_STORE_AUTH,
        settings,
        store.auth_token_secret_arn,
        GCS_STORE_AUTH_KEY,
    )
    (synced,) = provider_class["spec"]["secretObjects"]
    synced["secretName"] = GCS_STORE_AUTH
    synced["data"] = [{"objectName": GCS_STORE_AUTH_KEY, "key": GCS_STORE_AUTH_KEY}]
    return provider_class


def _provider_class(
    template: str, name: str, settings: Settings, secret_arn: str, alias: str
) -> dict[str, Any]:
    """A SecretProviderClass for one Secrets Manager secret, mounted as the file ``alias``."""
    provider_class = load(template)
    provider_class["metadata"].update(name=name, namespace=settings.serving.namespace)
    objects = [{"objectName": secret_arn, "objectAlias": alias}]
    provider_class["spec"]["parameters"]["objects"] = yaml.safe_dump(objects, sort_keys=False)
    return provider_class
