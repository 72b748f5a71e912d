"""The two Jobs of `pdctl efa-check`: a fi_pingpong server on a decode node and a client on a
prefill node, from the Ray LLM image, holding every EFA device of their nodes.

Why fi_pingpong: it is what the image has. The EFA installer puts libfabric's utilities
(`fi_info`, `fi_pingpong`, `fi_strerror`) in /opt/amazon/efa/bin, on the image's PATH
(aws/deep-learning-containers docker/ray_llm/Dockerfile.cuda runs the installer); the fabtests
suite (fi_rma_bw and friends) is a separate build the image does not carry, and NIXL's nixlbench
is not in the nixl wheels and needs etcd. One fi_pingpong per EFA device, device i of one node
against device i of the other (in sorted order on both sides, each pair on its own port).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from app_config import Settings
from app_config.node_labels import EFA_HUGEPAGES, EFA_RESOURCE
from serving_manifests.image import pod_image
from serving_manifests.names import EFA_CHECK_FIRST_PORT, EFA_CHECK_LABELS

MARK = "### pdctl-efa-check"
SERVER_ROLE, CLIENT_ROLE = "decode", "prefill"
# Seconds one device's ping-pong may take before the next device is tried.
PER_DEVICE_SECONDS = 60
CLIENT_CONNECT_ATTEMPTS = 30  # one a second while the server's next fi_pingpong starts
# libfabric over EFA as the Ray workers use it (manifests/rayservice.yaml).
FABRIC_ENV = {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"}

_DEVICES = f"""
echo "{MARK} uverbs $(ls /dev/infiniband 2>/dev/null | grep -c '^uverbs')"
echo "{MARK} fi_info"
fi_info -p efa -t FI_EP_RDM || echo "{MARK} fi_info-failed $?"
domains=$(fi_info -p efa -t FI_EP_RDM 2>/dev/null | awk '$1 == "domain:" {{print $2}}' | sort -u)
"""


@dataclass(frozen=True)
class EfaCheckPlan:
    """What both Jobs share: the settings' pass marks and where each side runs."""

    name: str
    namespace: str
    image: str
    iterations: int
    deadline_seconds: int
    efa_devices: dict[str, int]  # per role: the instance's network cards
    node_selectors: dict[str, dict[str, str]]
    tolerations: dict[str, list[dict[str, str]]]


def plan_for(
    settings: Settings,
    name: str,
    nodes: dict[str, str | None] | None = None,
    account: str | None = None,
) -> EfaCheckPlan:
    """``nodes`` pins a side to one node by name (a replaced node, say); else any of the group.
    ``account`` locates an image cache (serving.image_cache)."""
    groups = settings.gpu_nodes.groups()
    selectors, tolerations = {}, {}
    for role, group in groups.items():
        placement = group.placement(role)
        selectors[role] = dict(placement.labels)
        if nodes and nodes.get(role):
            selectors[role]["kubernetes.io/hostname"] = nodes[role]
        tolerations[role] = placement.tolerations()
    check = settings.gpu_nodes.efa_check
    return EfaCheckPlan(
        name=name,
        namespace=settings.serving.namespace,
        image=pod_image(settings, account),
        iterations=check.iterations,
        deadline_seconds=check.timeout_seconds,
        efa_devices={role: group.instance.network_cards for role, group in groups.items()},
        node_selectors=selectors,
        tolerations=tolerations,
    )


def _pingpong(iterations: int) -> str:
    return shlex.join(["fi_pingpong", "-p", "efa", "-e", "rdm", "-I", str(iterations), "-S", "all"])


def server_script(plan: EfaCheckPlan) -> str:
    """Device i listens on port FIRST + i. The first waits as long as the run may last (the
    client's node may still be joining or pulling the image); each next one a minute."""
    return (
        _DEVICES
        + f"""index=0
for domain in $domains; do
  echo "{MARK} pingpong $domain"
  wait_s=$([ "$index" -eq 0 ] && echo {plan.deadline_seconds} || echo {PER_DEVICE_SECONDS})
  timeout "$wait_s" {_pingpong(plan.iterations)} -d "$domain" \\
      -B $(({EFA_CHECK_FIRST_PORT} + index)) || echo "{MARK} pingpong-failed $domain $?"
  index=$((index + 1))
done
echo "{MARK} done"
"""
    )


def client_script(plan: EfaCheckPlan, server_ip: str) -> str:
    """Device i connects to the server's port FIRST + i, retrying while the server finishes the
    previous pair; a device whose server never listens fails alone, the next pair is unaffected."""
    return (
        _DEVICES
        + f"""index=0
for domain in $domains; do
  echo "{MARK} pingpong $domain"
  attempt=0
  until timeout {PER_DEVICE_SECONDS} {_pingpong(plan.iterations)} -d "$domain" \\
      -P $(({EFA_CHECK_FIRST_PORT} + index)) {shlex.quote(server_ip)}; do
    attempt=$((attempt + 1))
    if [ "$attempt" -ge {CLIENT_CONNECT_ATTEMPTS} ]; then
      echo "{MARK} pingpong-failed $domain"
      break
    fi
    sleep 1
  done
  index=$((index + 1))
done
echo "{MARK} done"
"""
    )


def job_name(plan: EfaCheckPlan, role: str) -> str:
    return f"{plan.name}-{role}"


def job_manifest(plan: EfaCheckPlan, role: str, script: str) -> dict[str, Any]:
    """Bounded by activeDeadlineSeconds even if pdctl dies; deleted by pdctl, else by the TTL."""
    efa = {EFA_RESOURCE: str(plan.efa_devices[role]), **EFA_HUGEPAGES}
    resources = {"cpu": "2", "memory": "8Gi", **efa}
    labels = {**EFA_CHECK_LABELS, "llm-serving/efa-check": plan.name, "llm-serving/role": role}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(plan, role), "namespace": plan.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": plan.deadline_seconds,
            "ttlSecondsAfterFinished": 600,
            "template": {
                "metadata": {"labels": labels},  # network policy allow-pdctl-efa-check
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "nodeSelector": plan.node_selectors[role],
                    "tolerations": plan.tolerations[role],
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "efa-check",
                            "image": plan.image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["bash", "-c", script],
                            "env": [{"name": k, "value": v} for k, v in FABRIC_ENV.items()],
                            "resources": {"requests": resources, "limits": resources},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["NET_RAW"]},
                            },
                        }
                    ],
                },
            },
        },
    }
