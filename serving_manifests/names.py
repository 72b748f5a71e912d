"""Names and labels the serving manifests share, derived from the configuration in one place."""

from __future__ import annotations

from dataclasses import dataclass

from app_config.derived_names import (  # noqa: F401  (re-exported: the renderers' names)
    endpoint_binding_name,
    endpoint_service_name,
    kuberay_serve_service_name,
    model_cache_volume_name,
    operator_rbac_prefix,
    pod_disruption_budget_name,
)

# Every pod of the RayService carries this label with the RayService's name: the network
# policies and the endpoint Service select by it.
RAYSERVICE_LABEL = "llm-serving/rayservice"
# Separate identities: KubeRay binds its autoscaler RBAC to the head's service account, and only
# the GPU workers, which load the model, get the model's IAM role.
HEAD_SERVICE_ACCOUNT = "ray-head"
WORKER_SERVICE_ACCOUNT = "ray-worker"
SERVE_PORT = 8000
DASHBOARD_PORT = 8265
METRICS_PORT = 8080  # KubeRay's default metrics-export-port for Ray nodes
METRICS_PORT_NAME = "metrics"  # the port name KubeRay itself gives it; the scraper keeps it
# Ray's autoscaler serves its own metrics here, in the head pod's sidecar (Ray 2.58
# autoscaler/_private/constants.py AUTOSCALER_METRIC_PORT). KubeRay 1.7 does not declare the
# port on the sidecar (ray-project/kuberay#4671): the scraper addresses it by number.
AUTOSCALER_METRICS_PORT = 44217
# Labels KubeRay puts on every pod it creates (ray-operator/controllers/ray/utils/constant.go).
KUBERAY_CLUSTER_LABEL = "ray.io/cluster"
KUBERAY_NODE_TYPE_LABEL = "ray.io/node-type"
# Written on every Ray pod template: what KubeRay hashes to decide on a new Ray cluster.
ENGINE_FINGERPRINT_ANNOTATION = "llm-serving/engine-config"
# On each worker template: the taints its tolerations answer. KubeRay 1.7 leaves tolerations out
# of that hash, so without it a new taint would never reach a running Ray cluster's workers.
TOLERATED_TAINTS_ANNOTATION = "llm-serving/tolerated-taints"
MODEL_CACHE_CLAIM = "model-cache"
MODEL_CACHE_HOST_PATH = "/mnt/k8s-disks/0/llm-serving/model-cache"
BENCH_LABELS = {"app.kubernetes.io/name": "pdctl-bench"}
EFA_CHECK_LABELS = {"app.kubernetes.io/name": "pdctl-efa-check"}
# fi_pingpong's control sockets (libfabric util/pingpong.c, -B/-P; 47592 is its default), one
# port per EFA device pair so that pair k of the client can only meet pair k of the server: the
# only IP traffic of `pdctl efa-check`; the ping-pongs themselves cross EFA, which is not IP.
EFA_CHECK_FIRST_PORT = 47592


def efa_check_ports(pairs: int) -> list[int]:
    return [EFA_CHECK_FIRST_PORT + index for index in range(pairs)]


def efa_check_port_entry(pairs: int) -> dict[str, object]:
    """All the pairs' ports as one NetworkPolicy entry: a port range counts once against the VPC
    CNI network policy agent's 24 entries per peer (tests/network_policy_model.py); p5's 32
    single ports would lose the last 8."""
    entry: dict[str, object] = {"protocol": "TCP", "port": EFA_CHECK_FIRST_PORT}
    if pairs > 1:
        entry["endPort"] = EFA_CHECK_FIRST_PORT + pairs - 1
    return entry


HF_TOKEN_MOUNT = "/var/run/secrets/huggingface"
HF_TOKEN_ALIAS = "token"
HF_TOKEN_PROVIDER_CLASS = "hf-token"
# The GCS store's AUTH token: SecretProviderClass, the Secret it syncs, the key and the mount.
GCS_STORE_AUTH = "gcs-store-auth"
GCS_STORE_AUTH_KEY = "password"
GCS_STORE_AUTH_MOUNT = "/var/run/secrets/gcs-store"
# ElastiCache's certificates chain to Amazon Trust Services, in the image's system bundle
# (Ubuntu's path); Ray's GCS client reads the CA from this variable for rediss:// addresses.
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@dataclass(frozen=True)
class EndpointBinding:
    """What the TargetGroupBinding needs from the load balancer CloudFormation created."""

    target_group_arn: str
    load_balancer_security_group_id: str
    # The load balancer's own subnets: the only addresses the pods admit on the Serve port.
    load_balancer_cidrs: tuple[str, ...]


@dataclass(frozen=True)
class GcsStoreBinding:
    """What the RayService needs from the GCS store CloudFormation created."""

    host: str  # the primary endpoint
    port: int
    auth_token_secret_arn: str
    head_role_arn: str  # the Ray head's IRSA role, which may read the token

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"
