"""The RayService (rayservice.yaml) filled in from the configuration and the Serve config."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from app_config import Settings, drain
from app_config.node_labels import (
    EFA_HUGEPAGES,
    EFA_RESOURCE,
    GPU_RESOURCE,
    GPU_ROLES,
    ROLE_LABEL,
    SHARED_GROUP,
    SYSTEM_ROLE,
)
from app_config.side import pinned_host_gib
from catalog.expert_parallel import NCCL_ON_EFA_ENV
from catalog.ray_llm_image import IMAGES
from serving_manifests.efa_device_check import fill_efa_device_check
from serving_manifests.image import pod_image
from serving_manifests.names import (
    DASHBOARD_PORT,
    ENGINE_FINGERPRINT_ANNOTATION,
    GCS_STORE_AUTH,
    GCS_STORE_AUTH_KEY,
    GCS_STORE_AUTH_MOUNT,
    HEAD_SERVICE_ACCOUNT,
    HF_TOKEN_ALIAS,
    HF_TOKEN_MOUNT,
    HF_TOKEN_PROVIDER_CLASS,
    METRICS_PORT,
    METRICS_PORT_NAME,
    MODEL_CACHE_CLAIM,
    RAYSERVICE_LABEL,
    SERVE_PORT,
    SYSTEM_CA_BUNDLE,
    TOLERATED_TAINTS_ANNOTATION,
    WORKER_SERVICE_ACCOUNT,
    GcsStoreBinding,
)
from serving_manifests.serve_config import engine_reload_fingerprint, ray_resource
from serving_manifests.serve_extensions import mount_serve_extensions
from serving_manifests.templates import load

# Left to the kubelet, system daemons and the page cache of the model files.
RESERVED_VCPUS = 8
MEMORY_REQUEST_SHARE = 0.85
SHM_SHARE = 0.10  # /dev/shm for NCCL and Ray's object store spill, memory-backed

# checkov's pod checks that these pods cannot meet, with why; written as checkov.io/skip
# annotations on the RayService itself, where `kubectl describe` shows them. Not on the pod
# templates: KubeRay 1.7 hashes those into its new-cluster decision, so rewording a reason would
# start a second Ray cluster (and a second set of GPU nodes).
POD_CHECKOV_SKIPS = {
    "CKV_K8S_8": "KubeRay injects its own liveness probe (the dashboard agent's /api/healthz) "
    "into Ray containers",
    "CKV_K8S_9": "KubeRay injects the head's readiness probe; the workers carry ours",
    "CKV_K8S_22": "Ray writes session state, logs and spill files under /tmp/ray in the image",
    "CKV_K8S_23": "The Ray LLM Deep Learning Container runs as root",
    "CKV_K8S_40": "The Ray LLM Deep Learning Container runs as root",
    "CKV_K8S_37": "NET_RAW is dropped; dropping ALL is unverified: the DLC image cannot be "
    "pulled and run outside AWS to prove its entrypoint and EFA path need no capability",
    "CKV_K8S_15": "IfNotPresent on purpose: a node keeps the image bytes it pulled first, so a "
    "recreated pod cannot run a newer patch release of the tag than the rest of its Ray "
    "cluster (Ray and NIXL need identical versions on every node)",
    "CKV_K8S_43": "By tag (catalog/ray_llm_image.py) unless serving.image_digest pins the "
    "digest, which the operator reads from the registry: AWS patch releases move the tag",
}


# Cluster Autoscaler's per-pod opt-out of node scale-down (cluster-autoscaler FAQ).
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


def render_rayservice(
    settings: Settings,
    serve_config: dict[str, Any],
    serve_extensions: dict[str, Any],
    gcs_store: GcsStoreBinding | None = None,
    account: str | None = None,
) -> dict[str, Any]:
    """``serve_extensions`` is the app's package's ConfigMap (serve_extensions.py), mounted on
    every Ray pod: its name, which carries the package's digest, is part of each template."""
    serving = settings.serving
    image = pod_image(settings, account)
    service = load("rayservice.yaml")
    service["metadata"].update(
        name=serving.name,
        namespace=serving.namespace,
        annotations=checkov_skip_annotations(POD_CHECKOV_SKIPS),
    )
    spec = service["spec"]
    spec["serveConfigV2"] = yaml.safe_dump(serve_config, sort_keys=False)
    spec["upgradeStrategy"] = {"type": serving.upgrade_strategy}
    spec["rayClusterDeletionDelaySeconds"] = serving.old_cluster_deletion_delay_seconds
    cluster = spec["rayClusterConfig"]
    cluster["rayVersion"] = IMAGES[serving.image_tag].ray_version
    cluster["autoscalerOptions"]["idleTimeoutSeconds"] = serving.ray_autoscaler.idle_timeout_seconds
    annotations = {ENGINE_FINGERPRINT_ANNOTATION: engine_reload_fingerprint(serve_config)}

    head = cluster["headGroupSpec"]["template"]
    head["metadata"]["labels"][RAYSERVICE_LABEL] = serving.name
    # The Cluster Autoscaler may empty an underused system node; moving the head would restart
    # the whole Ray cluster (every engine), so its node is never picked for scale-down.
    head["metadata"]["annotations"] = {**annotations, SAFE_TO_EVICT: "false"}
    head["spec"]["serviceAccountName"] = HEAD_SERVICE_ACCOUNT
    head["spec"]["nodeSelector"] = {ROLE_LABEL: SYSTEM_ROLE}
    (head_container,) = head["spec"]["containers"]
    head_container["image"] = image
    _set_ports(head_container)
    mount_serve_extensions(head["spec"], head_container, serve_extensions)
    if gcs_store:
        _use_gcs_store(cluster, head["spec"], head_container, gcs_store)

    (worker_skeleton,) = cluster["workerGroupSpecs"]
    cluster["workerGroupSpecs"] = [
        _worker_group(
            copy.deepcopy(worker_skeleton), settings, name, image, annotations, serve_extensions
        )
        for name in settings.gpu_nodes.groups()
    ]
    return service


# UCX settings of a shared node's Ray pod, where NIXL's UCX backend moves the KV cache between
# the two sides' engines of the pod, GPU to GPU (docs/architecture.md, 'Prefill and decode on
# one node'):
# - UCX_CUDA_IPC_ENABLE_GET_ZCOPY: vLLM 0.26's NixlConnector pulls (decode READs = UCX GET), and
#   UCX's cuda_ipc serves GET zero-copy only where it detects NVLink unless this is set (UCX
#   src/uct/cuda/cuda_ipc/cuda_ipc_iface.c config table: ENABLE_GET_ZCOPY, default "auto",
#   "Enable get operations except for platforms known to have slower performance"); without it a
#   PCIe node (g6e) falls back to a TCP relay at ~0.5 GB/s (vllm-project/vllm#52607,
#   ai-dynamo/nixl#2208). Measured on one H200 with two vLLM 0.26 engines (nixl-cu13 1.3.1's UCX,
#   UCX_TLS left at UCX's default): the READ went from 0.4 GB/s over TCP to cuda_ipc, TTFT p50
#   at 1 stream 388 -> 86 ms (docs/verification.md, 'How fast it is on one GPU'). UCX_TLS is
#   left alone: restricting it was not what the measurement ran.
SHARED_NODE_UCX_ENV = {"UCX_CUDA_IPC_ENABLE_GET_ZCOPY": "y"}


def _worker_group(
    group: dict[str, Any],
    settings: Settings,
    role: str,
    image: str,
    annotations: dict[str, str],
    serve_extensions: dict[str, Any],
) -> dict:
    """The Ray worker group of one node group, ``role`` its name: a side's, or the shared
    group's, whose pods hold both sides."""
    node_group = settings.gpu_nodes.groups()[role]
    instance, placement = node_group.instance, node_group.placement(role)
    sides = [side for side in settings.sides() if side.group == role]
    group["groupName"] = role
    # One worker pod per GPU node (it holds every GPU and EFA device): Ray's autoscaler never
    # asks for more pods than the node group can have nodes, nor keeps fewer than it must.
    scaling = node_group.scaling
    group.update(
        replicas=scaling.desired_size,
        minReplicas=scaling.min_size,
        maxReplicas=scaling.max_size,
    )
    # Each side's resource, one unit per GPU of the side: on a shared node's pod both, so that
    # a side's bundles (serve_config.py) take only its share of the pod's GPUs and Ray gives the
    # two sides' engine actors disjoint GPUs of the one pod (CUDA_VISIBLE_DEVICES per actor).
    group["resources"] = {ray_resource(side.role): str(side.gpus_per_node) for side in sides}

    pod = group["template"]
    pod["metadata"]["labels"].update({RAYSERVICE_LABEL: settings.serving.name, ROLE_LABEL: role})
    # The Cluster Autoscaler never drains a node for a Ray worker; Ray removes idle ones itself.
    pod["metadata"]["annotations"] = {
        **annotations,
        SAFE_TO_EVICT: "false",
        # KubeRay 1.7's new-cluster hash leaves tolerations out (ray-operator utils.
        # GenerateHashWithoutReplicasAndWorkersToDelete) and KubeRay never patches running
        # pods: written here, a taint change starts a Ray cluster whose workers tolerate it.
        TOLERATED_TAINTS_ANNOTATION: tolerated_taints(placement.tolerations()),
    }
    spec = pod["spec"]
    spec["serviceAccountName"] = WORKER_SERVICE_ACCOUNT
    drain_timeout = settings.serving.drain_timeout_seconds
    spec["terminationGracePeriodSeconds"] = drain.termination_grace_seconds(drain_timeout)
    spec["nodeSelector"] = dict(placement.labels)
    spec["tolerations"] = placement.tolerations()
    if role in GPU_ROLES:
        # Prefill and decode pods on one node fail with EAGAIN in NIXL: never co-locate the two
        # sides' pods (a shared node runs both sides in one pod instead, and needs no rule).
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [
                                {"key": ROLE_LABEL, "operator": "In", "values": _other_roles(role)}
                            ]
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }

    (container,) = spec["containers"]
    container["image"] = image
    _set_ports(container)
    container["env"].extend(
        {"name": name, "value": str(value)}
        for name, value in {
            "LLM_SERVING_SERVE_PORT": SERVE_PORT,
            "LLM_SERVING_DASHBOARD_PORT": DASHBOARD_PORT,
            "LLM_SERVING_DRAIN_SECONDS": drain_timeout,
            "LLM_SERVING_DRAIN_SETTLE_SECONDS": drain.SETTLE_SECONDS,
            "LLM_SERVING_DRAIN_POLL_SECONDS": drain.POLL_SECONDS,
            "LLM_SERVING_DRAIN_METRICS_URL": f"http://localhost:{METRICS_PORT}/metrics",
            # How long this worker's raylet keeps running once the head's GCS is gone: when
            # KubeRay deletes an old Ray cluster, head and workers go together, and the
            # workers' streams need their whole drain (drain.py).
            drain.GCS_RECONNECT_ENV: drain.gcs_reconnect_timeout_seconds(
                drain_timeout, gcs_fault_tolerance=settings.serving.gcs_fault_tolerance.enabled
            ),
        }.items()
    )
    if any(side.nodes_per_replica > 1 for side in sides):
        # The replica's ranks talk NCCL across nodes (the all-to-all, EPLB, DP sync): over EFA
        # through aws-ofi-nccl, and never silently over TCP sockets.
        container["env"].extend(
            {"name": name, "value": value} for name, value in NCCL_ON_EFA_ENV.items()
        )
    if role == SHARED_GROUP:
        container["env"].extend(
            {"name": name, "value": value} for name, value in SHARED_NODE_UCX_ENV.items()
        )
    # The host memory the engines pin (the KV offload tier, the weight offload) is the pod's
    # own (the cgroup charges it, and the limit equals the request): on top of the share left
    # for everything else.
    memory_gib = int(instance.memory_gib * MEMORY_REQUEST_SHARE) + pinned_host_gib(sides)
    resources = {
        "cpu": str(instance.vcpus - RESERVED_VCPUS),
        "memory": f"{memory_gib}Gi",
        GPU_RESOURCE: str(instance.gpus),
        EFA_RESOURCE: str(instance.network_cards),  # every EFA device of the node
        **EFA_HUGEPAGES,
    }
    container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    # Before Ray starts: the devices just requested are there and libfabric opens them.
    fill_efa_device_check(spec, role, instance.network_cards, container)
    for volume in spec["volumes"]:
        if volume["name"] == "dshm":
            volume["emptyDir"]["sizeLimit"] = f"{int(instance.memory_gib * SHM_SHARE)}Gi"
        if "persistentVolumeClaim" in volume:
            volume["persistentVolumeClaim"]["claimName"] = MODEL_CACHE_CLAIM
    mount_serve_extensions(spec, container, serve_extensions)
    if settings.serving.model.hf_token_secret_arn:
        _mount_hf_token(spec, container)
    return group


def _mount_hf_token(spec: dict[str, Any], container: dict[str, Any]) -> None:
    spec["volumes"].append(
        {
            "name": "hf-token",
            "csi": {
                "driver": "secrets-store.csi.k8s.io",
                "readOnly": True,
                "volumeAttributes": {"secretProviderClass": HF_TOKEN_PROVIDER_CLASS},
            },
        }
    )
    container["volumeMounts"].append(
        {"name": "hf-token", "mountPath": HF_TOKEN_MOUNT, "readOnly": True}
    )
    # huggingface_hub reads the token from this file; the value never sits in an env variable.
    container["env"].append(
        {"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_MOUNT}/{HF_TOKEN_ALIAS}"}
    )


def _use_gcs_store(
    cluster: dict[str, Any],
    head: dict[str, Any],
    container: dict[str, Any],
    store: GcsStoreBinding,
) -> None:
    """GCS state in the external store over TLS (rediss://), with its AUTH token from the Secret
    the head's CSI mount keeps in sync."""
    cluster["gcsFaultToleranceOptions"] = {
        "redisAddress": f"rediss://{store.address}",
        "redisPassword": {
            "valueFrom": {"secretKeyRef": {"name": GCS_STORE_AUTH, "key": GCS_STORE_AUTH_KEY}}
        },
    }
    head.setdefault("volumes", []).append(
        {
            "name": GCS_STORE_AUTH,
            "csi": {
                "driver": "secrets-store.csi.k8s.io",
                "readOnly": True,
                "volumeAttributes": {"secretProviderClass": GCS_STORE_AUTH},
            },
        }
    )
    container.setdefault("volumeMounts", []).append(
        {"name": GCS_STORE_AUTH, "mountPath": GCS_STORE_AUTH_MOUNT, "readOnly": True}
    )
    container.setdefault("env", []).append({"name": "RAY_REDIS_CA_CERT", "value": SYSTEM_CA_BUNDLE})


def _set_ports(container: dict[str, Any]) -> None:
    numbers = {"serve": SERVE_PORT, METRICS_PORT_NAME: METRICS_PORT}
    for port in container.get("ports", []):
        if port["name"] in numbers:
            port["containerPort"] = numbers[port["name"]]


def checkov_skip_annotations(
    skips: dict[str, str], prefix: str = "checkov.io/skip"
) -> dict[str, str]:
    """<prefix><N>: CHECK=reason, numbered from 1 (checkov's own annotation format)."""
    return {
        f"{prefix}{index}": f"{check}={reason}"
        for index, (check, reason) in enumerate(skips.items(), start=1)
    }


def tolerated_taints(tolerations: list[dict[str, str]]) -> str:
    """key=value:effect, comma-separated, in the order the node group sets them."""
    return ",".join(f"{t['key']}={t['value']}:{t['effect']}" for t in tolerations)


def _other_roles(role: str) -> list[str]:
    return [other for other in GPU_ROLES if other != role]
